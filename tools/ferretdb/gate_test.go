package main

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bsonDoc returns a BSON document whose first element is the int32 field
// name = 1 (a command document names its command first).
func bsonDoc(name string) []byte {
	body := append([]byte{0x10}, name...)
	body = append(body, 0, 1, 0, 0, 0, 0) // name terminator, int32 1, document terminator
	return append(binary.LittleEndian.AppendUint32(nil, uint32(4+len(body))), body...)
}

// opMsgWith builds an OP_MSG with request id id, flags, and sections.
func opMsgWith(id int32, flags uint32, sections ...[]byte) []byte {
	var body []byte
	body = binary.LittleEndian.AppendUint32(body, flags)
	for _, s := range sections {
		body = append(body, s...)
	}
	if flags&flagChecksum != 0 {
		body = append(body, 0, 0, 0, 0)
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(headerLen+len(body)))
	msg = binary.LittleEndian.AppendUint32(msg, uint32(id))
	msg = binary.LittleEndian.AppendUint32(msg, 0) // responseTo
	msg = binary.LittleEndian.AppendUint32(msg, opMsg)
	return append(msg, body...)
}

func command(name string) []byte { return append([]byte{0}, bsonDoc(name)...) }

// sequence is a kind 1 section: a document sequence named id.
func sequence(id string, docs ...[]byte) []byte {
	payload := append([]byte(id), 0)
	for _, d := range docs {
		payload = append(payload, d...)
	}
	s := []byte{1}
	s = binary.LittleEndian.AppendUint32(s, uint32(4+len(payload)))
	return append(s, payload...)
}

func TestGatedRequest(t *testing.T) {
	opQuery := opMsgWith(9, 0, command("insert"))
	binary.LittleEndian.PutUint32(opQuery[12:], 2004)
	for _, c := range []struct {
		name string
		msg  []byte
		want bool
	}{
		{"insert", opMsgWith(7, 0, command("insert")), true},
		{"update after its document sequence", opMsgWith(7, 0, sequence("updates", bsonDoc("q"), bsonDoc("u")), command("update")), true},
		{"delete with a checksum", opMsgWith(7, flagChecksum, command("delete")), true},
		{"findAndModify", opMsgWith(7, 0, command("findAndModify")), true},
		{"find", opMsgWith(7, 0, command("find")), false},
		{"hello", opMsgWith(7, 0, command("hello")), false},
		{"unacknowledged insert (moreToCome)", opMsgWith(7, flagMoreToCome, command("insert")), false},
		{"OP_QUERY", opQuery, false},
		{"truncated section", opMsgWith(7, 0, command("insert"))[:headerLen+4+3], false},
	} {
		id, got := gatedRequest(c.msg)
		if got != c.want || got && id != 7 {
			t.Errorf("%s: gatedRequest = %d, %v; want 7, %v", c.name, id, got, c.want)
		}
	}
}

// fakeServer answers every message after delay (responseTo = its request
// id) and records how many write commands it held at once.
type fakeServer struct {
	ln         net.Listener
	delay      time.Duration
	writes     atomic.Int32
	maxWrites  atomic.Int32
	received   chan int32 // write commands, as they arrive
	answered   chan int32
	readsAtMax atomic.Int32 // reads answered while a write was held
}

func newFakeServer(t *testing.T, delay time.Duration) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &fakeServer{ln: ln, delay: delay, received: make(chan int32, 100), answered: make(chan int32, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *fakeServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		msg, err := readMessage(r)
		if err != nil {
			return
		}
		id, write := gatedRequest(msg)
		if write {
			s.received <- id
			n := s.writes.Add(1)
			for m := s.maxWrites.Load(); n > m && !s.maxWrites.CompareAndSwap(m, n); m = s.maxWrites.Load() {
			}
			time.Sleep(s.delay) // the fake's work, not synchronisation
			s.writes.Add(-1)
		} else {
			id = int32(binary.LittleEndian.Uint32(msg[4:8]))
			if s.writes.Load() > 0 {
				s.readsAtMax.Add(1)
			}
		}
		answer := opMsgWith(0, 0, command("ok"))
		binary.LittleEndian.PutUint32(answer[8:12], uint32(id))
		_, _ = c.Write(answer)
		s.answered <- id
	}
}

func startGate(t *testing.T, backend string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { _ = serveGated(ln, backend, new(sync.Mutex)) }()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, addr string, msg []byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Error(err)
		return
	}
	if _, err := readMessage(bufio.NewReader(c)); err != nil {
		t.Error(err)
	}
}

// Write commands from several connections reach the server one at a time;
// reads pass while a write is held.
func TestGateLetsOneWriteThroughAtATime(t *testing.T) {
	srv := newFakeServer(t, 50*time.Millisecond)
	addr := startGate(t, srv.ln.Addr().String())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { roundTrip(t, addr, opMsgWith(int32(100+i), 0, command("update"))) })
	}
	<-srv.received // the reads come while writes are held
	for i := range 8 {
		wg.Go(func() { roundTrip(t, addr, opMsgWith(int32(200+i), 0, command("find"))) })
	}
	wg.Wait()
	if m := srv.maxWrites.Load(); m != 1 {
		t.Errorf("the server held %d writes at once, want 1", m)
	}
	if srv.readsAtMax.Load() == 0 {
		t.Error("no read was answered while a write was held: reads wait for the gate")
	}
}

// A client that sends a write and goes away before the answer keeps the
// gate shut until the server answered it: the next write reaches the
// server after that answer.
func TestGateWaitsForTheAnswerOfAnAbandonedWrite(t *testing.T) {
	srv := newFakeServer(t, 200*time.Millisecond)
	addr := startGate(t, srv.ln.Addr().String())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(opMsgWith(1, 0, command("update"))); err != nil {
		t.Fatal(err)
	}
	c.Close() // a driver that timed out
	<-srv.received
	roundTrip(t, addr, opMsgWith(2, 0, command("update")))
	if first, second := <-srv.answered, <-srv.answered; first != 1 || second != 2 {
		t.Fatalf("answers in the order %d, %d; want the abandoned write 1 first", first, second)
	}
	if m := srv.maxWrites.Load(); m != 1 {
		t.Errorf("the server held %d writes at once, want 1", m)
	}
}
