package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// FerretDB v1 runs an update (and findAndModify) as a query for the
// documents that match the filter followed by a write of each by its _id,
// which does not check the filter again. Two conditional writes of one
// document ("replace it if its revision is still r") that run at once can
// therefore both succeed, and one of them is lost. MongoDB applies a write
// to one document atomically, and Sink's revision preconditions rely on
// that. writeGate gives FerretDB the same guarantee for tests: it sits in
// front of FerretDB and lets one write command at a time through, from
// its request until its response. Reads and everything else pass through
// freely.
//
// A connection whose client goes away (a driver timeout) is closed toward
// FerretDB only after FerretDB answered what it was sent: FerretDB runs a
// request it has read even when nobody waits for its answer, and the gate
// stays shut until it did.

// writeCommands are the commands that write documents (OP_MSG command
// names; findandmodify is the legacy spelling).
var writeCommands = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true}

const (
	opMsg          = 2013
	headerLen      = 16
	maxMessageSize = 48 << 20 // MongoDB's maxMessageSizeBytes
	flagChecksum   = 1 << 0
	flagMoreToCome = 1 << 1
)

// serveGated accepts connections on ln and proxies each to backend,
// passing write commands through gate one at a time. It returns when ln
// is closed.
func serveGated(ln net.Listener, backend string, gate *sync.Mutex) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go proxyConn(c, backend, gate)
	}
}

// proxyConn copies client's requests to a new connection to backend and
// the answers back (see writeGate above).
func proxyConn(client net.Conn, backend string, gate *sync.Mutex) {
	defer client.Close()
	server, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer server.Close()

	var mu sync.Mutex
	holding := map[int32]bool{} // request ids of write commands holding the gate
	answers := make(chan struct{})
	go func() {
		defer close(answers)
		defer client.Close() // FerretDB closed: so does the client's connection
		r := bufio.NewReader(server)
		clientGone := false
		for {
			msg, err := readMessage(r)
			if err != nil {
				return
			}
			mu.Lock()
			if id := int32(binary.LittleEndian.Uint32(msg[8:12])); holding[id] { // responseTo
				delete(holding, id)
				gate.Unlock()
			}
			mu.Unlock()
			if !clientGone {
				if _, err := client.Write(msg); err != nil {
					clientGone = true // keep reading FerretDB's answers: they open the gate
				}
			}
		}
	}()

	r := bufio.NewReader(client)
	for {
		msg, err := readMessage(r)
		if err != nil {
			break
		}
		if id, ok := gatedRequest(msg); ok {
			gate.Lock()
			mu.Lock()
			holding[id] = true
			mu.Unlock()
		}
		if _, err := server.Write(msg); err != nil {
			break
		}
	}
	// FerretDB answers what it read, then sees the end of the requests and
	// closes its side, which ends the answers' loop.
	if tc, ok := server.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = server.Close()
	}
	<-answers
	mu.Lock()
	for id := range holding { // answers that never came: FerretDB closed first
		delete(holding, id)
		gate.Unlock()
	}
	mu.Unlock()
}

// readMessage reads one wire-protocol message (header included).
func readMessage(r *bufio.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(h[:]))
	if n < headerLen || n > maxMessageSize {
		return nil, fmt.Errorf("message length %d out of range", n)
	}
	msg := make([]byte, n)
	copy(msg, h[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// gatedRequest reports whether msg is an OP_MSG write command that expects
// an answer, and returns its request id. (An unacknowledged write, with
// moreToCome, gets no answer to open the gate again; Sink sends none.)
func gatedRequest(msg []byte) (int32, bool) {
	if len(msg) < headerLen+4 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return 0, false
	}
	flags := binary.LittleEndian.Uint32(msg[headerLen:])
	if flags&flagMoreToCome != 0 {
		return 0, false
	}
	body := msg[headerLen+4:]
	if flags&flagChecksum != 0 && len(body) >= 4 {
		body = body[:len(body)-4]
	}
	for len(body) > 0 {
		kind := body[0]
		body = body[1:]
		if len(body) < 4 {
			return 0, false
		}
		n := int(binary.LittleEndian.Uint32(body))
		if n < 5 || n > len(body) {
			return 0, false
		}
		if kind == 0 { // the command document: its first key names the command
			if !writeCommands[firstKey(body[:n])] {
				return 0, false
			}
			return int32(binary.LittleEndian.Uint32(msg[4:8])), true
		}
		body = body[n:] // kind 1: a document sequence (its size counts itself)
	}
	return 0, false
}

// firstKey returns the name of the first element of the BSON document doc.
func firstKey(doc []byte) string {
	if len(doc) < 6 { // length, type, at least the name's terminator
		return ""
	}
	name := doc[5:]
	for i, b := range name {
		if b == 0 {
			return string(name[:i])
		}
	}
	return ""
}
