package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	testGroup     = "g"
	testSession   = time.Second
	testRebalance = 4 * time.Second
)

// member is a classic group member driven by hand, with a client (and so
// a connection) of its own.
type member struct {
	t   *testing.T
	cl  *kgo.Client
	id  string
	gen int32
}

func newMember(t *testing.T, addr string) *member {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &member{t: t, cl: cl}
}

func (m *member) joinRequest() *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = testGroup, m.id, "consumer"
	req.SessionTimeoutMillis = int32(testSession.Milliseconds())
	req.RebalanceTimeoutMillis = int32(testRebalance.Milliseconds())
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0, 0, 0}
	req.Protocols = append(req.Protocols, p)
	return req
}

// join joins the group (asking for a member id first) and returns the
// answer; it waits up to limit for the rebalance.
func (m *member) join(limit time.Duration) (*kmsg.JoinGroupResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if m.id == "" {
		resp, err := m.joinRequest().RequestWith(ctx, m.cl)
		if err != nil {
			return nil, err
		}
		if kerr.ErrorForCode(resp.ErrorCode) != kerr.MemberIDRequired {
			m.t.Fatalf("first join: %v, want MEMBER_ID_REQUIRED", kerr.ErrorForCode(resp.ErrorCode))
		}
		m.id = resp.MemberID
	}
	resp, err := m.joinRequest().RequestWith(ctx, m.cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return resp, err
	}
	m.gen = resp.Generation
	return resp, nil
}

func (m *member) sync(assign ...string) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = testGroup, m.id, m.gen
	for _, id := range assign {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID = id
		req.GroupAssignment = append(req.GroupAssignment, a)
	}
	resp, err := req.RequestWith(context.Background(), m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		m.t.Fatalf("sync of %s: %v", m.id, err)
	}
}

func (m *member) heartbeat() error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = testGroup, m.id, m.gen
	resp, err := req.RequestWith(context.Background(), m.cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// A member waiting in JoinGroup for a rebalance that waits for another
// member is kept in the group until the rebalance ends (as on a Kafka
// broker), even when that takes longer than its session timeout: kfake
// alone removes it after the session timeout and never answers its join.
func TestMemberWaitingInJoinOutlivesItsSessionTimeout(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	startReaper(c, addr, 200*time.Millisecond)

	// a and b form a stable group of generation 2.
	a, b := newMember(t, addr), newMember(t, addr)
	if _, err := a.join(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	a.sync(a.id)
	bJoined := make(chan error, 1)
	go func() { _, err := b.join(10 * time.Second); bJoined <- err }()
	for err := a.heartbeat(); !errors.Is(err, kerr.RebalanceInProgress); err = a.heartbeat() {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // b's join has not reached the group yet
	}
	if _, err := a.join(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-bJoined; err != nil {
		t.Fatal(err)
	}
	a.sync(a.id, b.id)
	b.sync()

	// b stays alive but never rejoins: a new member's rebalance waits for
	// it until the rebalance timeout, longer than a's session timeout.
	stopB := make(chan struct{})
	defer close(stopB)
	go func() {
		for {
			select {
			case <-stopB:
				return
			case <-time.After(200 * time.Millisecond):
				_ = b.heartbeat()
			}
		}
	}()
	newcomer := newMember(t, addr)
	go func() { _, _ = newcomer.join(10 * time.Second) }()
	for err := a.heartbeat(); !errors.Is(err, kerr.RebalanceInProgress); err = a.heartbeat() {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if _, err := a.join(testRebalance + 3*time.Second); err != nil {
		t.Fatalf("a's join, waiting for a rebalance longer than a's session timeout: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
}
