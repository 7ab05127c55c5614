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
// session would expire. reapGhosts emulates that expiry: a member whose
// last request was a JoinGroup older than that join's rebalance timeout
// plus its session timeout (a live member has had its answer and sent
// SyncGroup or a heartbeat by then) is removed with a LeaveGroup.

type memberSeen struct {
	at      time.Time
	join    bool          // the last request was a JoinGroup
	timeout time.Duration // the join's rebalance + session timeouts
}

type ghostReaper struct {
	mu   sync.Mutex
	seen map[[2]string]memberSeen // group, member id
}

// reapGhosts watches the group requests of c and, every second, removes
// the ghost members (see above) through a client dialing addr.
func reapGhosts(c *kfake.Cluster, addr string) {
	r := &ghostReaper{seen: map[[2]string]memberSeen{}}
	observe := func(req kmsg.Request) (kmsg.Response, error, bool) {
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		switch req := req.(type) {
		case *kmsg.JoinGroupRequest:
			if req.MemberID != "" {
				d := time.Duration(req.RebalanceTimeoutMillis+req.SessionTimeoutMillis) * time.Millisecond
				r.seen[[2]string{req.Group, req.MemberID}] = memberSeen{at: now, join: true, timeout: d}
			}
		case *kmsg.SyncGroupRequest:
			r.seen[[2]string{req.Group, req.MemberID}] = memberSeen{at: now}
		case *kmsg.HeartbeatRequest:
			r.seen[[2]string{req.Group, req.MemberID}] = memberSeen{at: now}
		case *kmsg.LeaveGroupRequest:
			delete(r.seen, [2]string{req.Group, req.MemberID})
			for _, m := range req.Members {
				delete(r.seen, [2]string{req.Group, m.MemberID})
			}
		}
		return nil, nil, false // observe only: kfake handles the request
	}
	for _, k := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup} {
		c.ControlKey(int16(k), observe)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakebroker: no ghost member reaper: %v\n", err)
		return
	}
	go func() {
		for range time.Tick(time.Second) {
			for _, k := range r.ghosts(time.Now()) {
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
					r.seen[k] = memberSeen{at: time.Now(), join: true} // try again later
					r.mu.Unlock()
					continue
				}
				// UNKNOWN_MEMBER_ID: it rejoined under another id or
				// expired; nothing to do.
				if len(resp.Members) == 1 && resp.Members[0].ErrorCode == 0 {
					fmt.Fprintf(os.Stderr, "kfakebroker: removed ghost member %s of group %s\n", k[1], k[0])
				}
			}
		}
	}()
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
