package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Ghost members: kfake starts a classic group member's session timer only
// when a response reaches the member. A member killed while its JoinGroup
// waits for the rebalance (a worker SIGKILLed right after it restarted)
// is still given partitions by the leader, but its JoinGroup answer goes
// to a dead connection, so no session timer is started for it, and the
// leader's SyncGroup cancels the timer that would remove members that
// never sync. The member then holds its partitions (nobody consumes them)
// until something else rebalances the group: on a real Kafka broker its
// session would expire. The reaper emulates that expiry: a member whose
// last request was a JoinGroup older than that join's rebalance timeout
// plus its session timeout (a live member has had its answer and sent
// SyncGroup or a heartbeat by then) is removed with a LeaveGroup.
//
// Members waiting in JoinGroup: kfake keeps running a member's session
// timer while its JoinGroup waits for the rebalance, so a member whose
// rebalance waits longer than its session timeout (for a member that does
// not rejoin) is removed, and its JoinGroup is never answered: the client
// times out after the rebalance timeout + 10 s and joins again, often into
// the next such wait. A Kafka broker keeps a member that waits in JoinGroup
// until the rebalance ends. The reaper emulates that too: while a member's
// JoinGroup is younger than its rebalance timeout, it sends heartbeats on
// the member's behalf (with the member's last generation), which restart
// the member's session timer. (A member's first JoinGroup needs none: kfake
// stops a new member's session timer when it joins.)

type memberSeen struct {
	at        time.Time
	join      bool          // the last request was a JoinGroup
	timeout   time.Duration // the join's rebalance + session timeouts
	rebalance time.Duration // the join's rebalance timeout
	gen       int32         // the last generation the member sent (-1: none yet)
}

type ghostReaper struct {
	mu   sync.Mutex
	seen map[[2]string]memberSeen // group, member id
	// ours counts, per member, the heartbeats the reaper sent and the
	// observer has not seen yet (they are not the member's requests).
	ours map[[2]string]int
}

// startReaper watches the group requests of c and, every tick, keeps the
// members waiting in JoinGroup alive and removes the ghost members (see
// above), through a client dialing addr.
func startReaper(c *kfake.Cluster, addr string, tick time.Duration) {
	r := &ghostReaper{seen: map[[2]string]memberSeen{}, ours: map[[2]string]int{}}
	for _, k := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup} {
		c.ControlKey(int16(k), r.observe)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakebroker: no ghost member reaper: %v\n", err)
		return
	}
	go func() {
		for range time.Tick(tick) {
			now := time.Now()
			for _, w := range r.waiting(now) {
				go r.keepAlive(cl, w)
			}
			for _, k := range r.ghosts(now) {
				r.reap(cl, k)
			}
		}
	}()
}

// observe records the group requests of the members (kfake handles them).
func (r *ghostReaper) observe(req kmsg.Request) (kmsg.Response, error, bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req := req.(type) {
	case *kmsg.JoinGroupRequest:
		if req.MemberID != "" {
			k := [2]string{req.Group, req.MemberID}
			gen := int32(-1)
			if prev, ok := r.seen[k]; ok {
				gen = prev.gen
			}
			rebalance := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
			r.seen[k] = memberSeen{at: now, join: true, rebalance: rebalance, gen: gen,
				timeout: rebalance + time.Duration(req.SessionTimeoutMillis)*time.Millisecond}
		}
	case *kmsg.SyncGroupRequest:
		r.seen[[2]string{req.Group, req.MemberID}] = memberSeen{at: now, gen: req.Generation}
	case *kmsg.HeartbeatRequest:
		k := [2]string{req.Group, req.MemberID}
		if r.ours[k] > 0 { // sent by keepAlive, not by the member
			if r.ours[k]--; r.ours[k] == 0 {
				delete(r.ours, k)
			}
			break
		}
		r.seen[k] = memberSeen{at: now, gen: req.Generation}
	case *kmsg.LeaveGroupRequest:
		delete(r.seen, [2]string{req.Group, req.MemberID})
		for _, m := range req.Members {
			delete(r.seen, [2]string{req.Group, m.MemberID})
		}
	}
	return nil, nil, false
}

// waitingMember is a member waiting in JoinGroup, with the generation to
// send its heartbeats with.
type waitingMember struct {
	key [2]string
	gen int32
}

// waiting returns the members whose JoinGroup is younger than its
// rebalance timeout and that were in the group before (a member's first
// JoinGroup stops its session timer in kfake: it needs no heartbeats),
// and counts the heartbeats about to be sent for them.
func (r *ghostReaper) waiting(now time.Time) []waitingMember {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []waitingMember
	for k, s := range r.seen {
		if s.join && s.gen >= 0 && now.Sub(s.at) < s.rebalance {
			out = append(out, waitingMember{k, s.gen})
			r.ours[k]++
		}
	}
	return out
}

// keepAlive sends a heartbeat on behalf of a member waiting in JoinGroup:
// kfake answers REBALANCE_IN_PROGRESS and restarts the member's session
// timer.
func (r *ghostReaper) keepAlive(cl *kgo.Client, w waitingMember) {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = w.key[0], w.key[1], w.gen
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := req.RequestWith(ctx, cl); err != nil {
		r.mu.Lock()
		if r.ours[w.key] > 0 { // (it may not have reached the broker)
			r.ours[w.key]--
		}
		r.mu.Unlock()
	}
}

// reap removes the ghost member k.
func (r *ghostReaper) reap(cl *kgo.Client, k [2]string) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = k[0]
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = k[1]
	m.Reason = kmsg.StringPtr("kfakebroker: the member never got its JoinGroup answer (dead)")
	req.Members = append(req.Members, m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := req.RequestWith(ctx, cl)
	cancel()
	if err != nil {
		r.mu.Lock()
		r.seen[k] = memberSeen{at: time.Now(), join: true, gen: -1} // try again later
		r.mu.Unlock()
		return
	}
	// UNKNOWN_MEMBER_ID: it rejoined under another id or expired; nothing
	// to do.
	if len(resp.Members) == 1 && resp.Members[0].ErrorCode == 0 {
		fmt.Fprintf(os.Stderr, "kfakebroker: removed ghost member %s of group %s\n", k[1], k[0])
	}
}

// ghosts returns (and forgets) the members whose last JoinGroup is older
// than its timeouts with no request since, and forgets members not seen
// for long.
func (r *ghostReaper) ghosts(now time.Time) [][2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][2]string
	for k, s := range r.seen {
		switch {
		case s.join && now.Sub(s.at) > s.timeout:
			out = append(out, k)
			delete(r.seen, k)
		case !s.join && now.Sub(s.at) > 10*time.Minute:
			delete(r.seen, k) // left or expired long ago
		}
	}
	return out
}
