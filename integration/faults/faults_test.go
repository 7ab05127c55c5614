package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/ctxtime"
)

// fault is one kind of fault: inject runs while the load runs and returns
// when the fault is over (the moment recovery starts).
type fault struct {
	name string
	sync bool // synchronous load (WAIT_UNTIL_APPLIED) instead of async accepts
	// burst sends the load as fast as the server accepts it, so that the
	// workers have a backlog and work through full batches.
	burst bool
	// spread runs the load over the fault: it starts with the load and
	// lasts past it (instead of at a random point of the load).
	spread   bool
	describe string
	inject   func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error)
	// only names the database the fault applies to (empty: every one);
	// against another its rows say n/a.
	only string
}

const (
	dbPause       = 8 * time.Second                // longer than the driver's timeouts (dbURI: 3 s, 5 s)
	partitionTime = sessionTimeout + 4*time.Second // longer than the group session timeout
	freezeTime    = sessionTimeout + 6*time.Second // longer than the session timeout: the worker is expelled while frozen
	recoveryLimit = 90 * time.Second               // a trial fails when not recovered by then
	loadInterval  = 60 * time.Millisecond          // between two mutations of one record
	loadRecords   = 8                              // records per trial
	loadPerRecord = 50                             // mutations per record: 400 per trial over 3 s
	loadDuration  = loadPerRecord * loadInterval   // about 3 s
	stopGrace     = 25 * time.Second               // docker stop grace for SIGTERM
	connKillTime  = 3 * time.Second                // db-connections: how long Sink's backends are terminated
	connKillEvery = 100 * time.Millisecond         // db-connections: between two rounds that end every backend
	connPollEvery = 20 * time.Millisecond          // db-connections: between two rounds that end the backends in flight (at 2 ms no statement got through for the whole fault)
	allFaults     = "worker-sigkill,worker-freeze,db-pause,db-kill,db-connections,worker-partition,broker-restart,server-sigterm"
	defaultTrials = "worker-sigkill=3,worker-freeze=2,db-pause=2,worker-partition=2,broker-restart=2,server-sigterm=2"
	// defaultTrialsPostgres: SINK_FAULTS_DB=postgres runs the database
	// faults and worker kills (the others do not touch the database);
	// SINK_FAULTS_TRIALS adds any.
	defaultTrialsPostgres = "worker-sigkill=3,db-pause=3,db-kill=3,db-connections=3"
)

func faults() []fault {
	return []fault{
		{
			name:     "worker-sigkill",
			burst:    true,
			describe: "SIGKILL of a worker container at a random point of the load, then started again",
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				w := c.workers[rng.IntN(len(c.workers))]
				if err := w.kill(syscall.SIGKILL); err != nil {
					return "", err
				}
				if err := w.waitExit(10 * time.Second); err != nil {
					return "", err
				}
				return w.role, w.restart()
			},
		},
		{
			name:     "worker-freeze",
			burst:    true,
			describe: fmt.Sprintf("docker pause of a worker for %s (session timeout %s: the group expels it and its partitions move), then unpause: it wakes up in the middle of what it was doing", freezeTime, sessionTimeout),
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				w := c.workers[rng.IntN(len(c.workers))]
				if err := w.pause(); err != nil {
					return "", err
				}
				ctxtime.Sleep(ctx, freezeTime) // the length of the fault
				return w.role, w.unpause()
			},
		},
		{
			name:     "db-pause",
			describe: fmt.Sprintf("docker pause of the database for %s (MongoDB driver timeouts 3-5 s; PostgreSQL connect_timeout 3 s, statements wait), then unpause", dbPause),
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				if err := c.db.pause(); err != nil {
					return "", err
				}
				ctxtime.Sleep(ctx, dbPause) // the length of the fault
				return "", c.db.unpause()
			},
		},
		{
			name:     "db-kill",
			describe: "SIGKILL of the database container (the server and its backends die at once), then the same container started again: crash recovery from its data",
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				starts := countLines(c.db.logs(1000), "READY ")
				t0 := time.Now()
				if err := c.db.kill(syscall.SIGKILL); err != nil {
					return "", err
				}
				if err := c.db.waitExit(10 * time.Second); err != nil {
					return "", err
				}
				if err := c.db.restart(); err != nil {
					return "", err
				}
				switch {
				case c.database == dbPostgres:
					if err := awaitPostgres(ctx, c.db, c.pgPort, 60*time.Second); err != nil {
						return "", err
					}
				case c.dbURI == dbURI:
					if err := c.db.awaitLog(ctx, "READY ", starts+1, 60*time.Second); err != nil {
						return "", err
					}
				}
				return "answering again " + time.Since(t0).Round(time.Millisecond).String() + " after the kill;", nil
			},
		},
		{
			name: "db-connections",
			only: dbPostgres,
			// No burst: the load runs through the fault, so that the
			// workers are writing while their connections are cut.
			spread:   true,
			describe: fmt.Sprintf("pg_terminate_backend of the Sink processes' backends for %s while the load runs: every %s those running a statement or inside a transaction, every %s all of them; the trial fails unless at least one was cut in flight (each trial's detail says how many, and in which states)", connKillTime, connPollEvery, connKillEvery),
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				k, err := newBackendKiller(ctx, c.pgPort)
				if err != nil {
					return "", err
				}
				defer k.close()
				rounds, total := 0, 0
				lastAll := time.Time{}
				for end := time.Now().Add(connKillTime); time.Now().Before(end); rounds++ {
					all := time.Since(lastAll) >= connKillEvery
					if all {
						lastAll = time.Now()
					}
					n, err := k.terminate(ctx, !all)
					if err != nil {
						return "", err
					}
					total += n
					ctxtime.Sleep(ctx, connPollEvery) // the fault's rhythm
				}
				states := []string{}
				for _, s := range slices.Sorted(maps.Keys(k.ended)) {
					states = append(states, fmt.Sprintf("%d %s", k.ended[s], s))
				}
				detail := fmt.Sprintf("%d backends terminated in %d rounds, %d of them in flight (%s);", total, rounds, k.inFlight, strings.Join(states, ", "))
				if k.inFlight == 0 {
					return detail, missedFault{"no backend was running a statement or inside a transaction when it was terminated"}
				}
				return detail, nil
			},
		},
		{
			name:     "worker-partition",
			describe: fmt.Sprintf("network disconnect of a worker from the broker for %s (session timeout %s), then reconnect", partitionTime, sessionTimeout),
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				w := c.workers[rng.IntN(len(c.workers))]
				if err := w.disconnect(c.logNet.ID); err != nil {
					return "", err
				}
				ctxtime.Sleep(ctx, partitionTime) // the length of the fault
				return w.role, w.connect(c.logNet.ID)
			},
		},
		{
			name:     "broker-restart",
			describe: "broker stopped (odd trials SIGTERM, even trials SIGKILL) during async accepts, then started again",
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				starts := countLines(c.broker.logs(1000), "READY ")
				how := "SIGTERM"
				if trial%2 == 0 {
					how = "SIGKILL"
					if err := c.broker.kill(syscall.SIGKILL); err != nil {
						return "", err
					}
				} else if err := c.broker.kill(syscall.SIGTERM); err != nil {
					return "", err
				}
				if err := c.broker.waitExit(stopGrace); err != nil {
					return "", err
				}
				if err := c.broker.restart(); err != nil {
					return "", err
				}
				return how, c.broker.awaitLog(ctx, "READY ", starts+1, 30*time.Second)
			},
		},
		{
			name:     "server-sigterm",
			sync:     true,
			describe: "SIGTERM of the server under synchronous load, then started again",
			inject: func(ctx context.Context, c *cluster, trial int, rng *rand.Rand) (string, error) {
				if err := c.server.kill(syscall.SIGTERM); err != nil {
					return "", err
				}
				if err := c.server.waitExit(stopGrace); err != nil {
					return "", err
				}
				if err := c.server.restart(); err != nil {
					return "", err
				}
				return "", c.awaitServing(ctx, 30*time.Second)
			},
		},
	}
}

// missedFault is the error of a fault that ran but did not hit what it
// is for (db-connections: no backend cut in flight).
type missedFault struct{ what string }

func (m missedFault) Error() string { return m.what }

// trialsConfig parses SINK_FAULTS_TRIALS over the defaults of the database.
func trialsConfig(database string) (map[string]int, error) {
	out := map[string]int{}
	defaults := defaultTrials
	if database == dbPostgres {
		defaults = defaultTrialsPostgres
	}
	for _, spec := range []string{defaults, os.Getenv(envTrials)} {
		for _, f := range strings.Split(spec, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			name, n, ok := strings.Cut(f, "=")
			v, err := strconv.Atoi(n)
			if !ok || err != nil || v < 0 || !slices.Contains(strings.Split(allFaults, ","), name) {
				return nil, fmt.Errorf("%s: bad entry %q (want name=count with a name of %s)", envTrials, f, allFaults)
			}
			out[name] = v
		}
	}
	return out, nil
}

// trialResult is one row of the per-trial table.
type trialResult struct {
	fault     string
	trial     int
	detail    string
	counts    counts
	retryable int
	wrong     int
	recovery  time.Duration
	failed    bool
	na        bool  // the fault does not apply to the database
	load      *load // for the late check of trials with missing mutations
}

// The container fault suite: every fault, its trials, the table.
func TestFaults(t *testing.T) {
	e := suiteEngine(t)
	database, err := faultsDB()
	if err != nil {
		t.Fatal(err)
	}
	trials, err := trialsConfig(database)
	if err != nil {
		t.Fatal(err)
	}
	requireOnce := os.Getenv(envRequireOnce) != "0" // effectively-once delivery has landed (#15)
	rng := suiteRand(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	c := warmCluster(t, ctx, e)
	defer c.close()

	var results []trialResult
	for _, f := range faults() {
		if f.only != "" && f.only != c.database && trials[f.name] > 0 {
			t.Logf("%s: does not apply to %s (n/a)", f.name, c.dbKind)
			results = append(results, trialResult{fault: f.name, na: true})
			continue
		}
		for i := 1; i <= trials[f.name]; i++ {
			t.Run(fmt.Sprintf("%s/%d", f.name, i), func(t *testing.T) {
				r := runTrial(t, ctx, c, f, i, rng)
				results = append(results, r)
				if r.counts.Lost > 0 || r.counts.OutOfOrder > 0 || r.counts.Unasked > 0 || r.wrong > 0 {
					t.Errorf("%s trial %d: %d lost, %d out of order, %d never sent, %d wrong answers", f.name, i, r.counts.Lost, r.counts.OutOfOrder, r.counts.Unasked, r.wrong)
				}
				if requireOnce && r.counts.Twice > 0 {
					t.Errorf("%s trial %d: %d applications twice (%s=0 only reports them)", f.name, i, r.counts.Twice, envRequireOnce)
				}
			})
		}
	}
	// Mutations missing at a trial's recovery limit: applied since (late),
	// or still missing at the end of the suite (lost for good, or later still).
	var late []string
	for _, r := range results {
		if r.counts.Lost == 0 || r.load == nil {
			continue
		}
		acked, failed, sent, _, _ := r.load.snapshot()
		applied, err := r.load.applied(ctx, c.client)
		if err != nil {
			t.Logf("late check of %s trial %d: %v", r.fault, r.trial, err)
			continue
		}
		now := analyze(acked, failed, applied, sent)
		line := fmt.Sprintf("%s trial %d: %d of its %d missing mutations were applied after the %s recovery limit; %d still missing at the end of the suite",
			r.fault, r.trial, r.counts.Lost-now.Lost, r.counts.Lost, recoveryLimit, now.Lost)
		t.Log(line)
		late = append(late, line)
	}
	if c.database == dbPostgres {
		if leaks := passwordLeaks(append([]*container{c.server}, c.workers...)); len(leaks) > 0 {
			t.Errorf("the logs of %v show a part of the PostgreSQL password", leaks)
		}
	}
	table := renderTable(results, c.dbKind+"; Sink built from "+c.sinkSource, requireOnce, time.Since(t0))
	if len(late) > 0 {
		table += "\nLost at the recovery limit, checked again at the end:\n- " + strings.Join(late, "\n- ") + "\n"
	}
	fmt.Println(table)
	if p := os.Getenv(envReport); p != "" {
		if err := os.WriteFile(p, []byte(table), 0o644); err != nil {
			t.Errorf("cannot write %s: %v", p, err)
		}
	}
}

// runTrial runs the load on a fresh dataset, injects the fault at a random
// point of it, and waits until every acknowledged mutation is applied.
func runTrial(t *testing.T, ctx context.Context, c *cluster, f fault, trial int, rng *rand.Rand) trialResult {
	if err := c.awaitWorkers(ctx, 90*time.Second); err != nil {
		t.Fatalf("before the trial: %v", err)
	}
	interval := loadInterval
	if f.burst {
		interval = 0
	}
	l := newLoad(fmt.Sprintf("%s-%d", f.name, trial), loadRecords, loadPerRecord, interval, f.sync)
	at := time.Duration(float64(loadDuration) * (0.15 + 0.5*rng.Float64()))
	if f.spread {
		at = 0
	}
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		l.run(ctx, c.client)
	}()
	ctxtime.Sleep(ctx, at) // the random point of the load at which the fault starts
	faultStart := time.Now()
	detail, err := f.inject(ctx, c, trial, rng)
	healed := time.Now()
	var missed missedFault
	if errors.As(err, &missed) {
		// The fault ran but did not hit what it is for: the trial fails,
		// and its load is still checked.
		t.Errorf("%s trial %d: %s", f.name, trial, missed.what)
		detail += " " + missed.what + ";"
	} else if err != nil {
		t.Fatalf("injecting %s: %v", f.name, err)
	}
	progress := "?"
	if applied, err := l.applied(ctx, c.client); err == nil {
		n := 0
		for _, seqs := range applied {
			n += len(seqs)
		}
		progress = strconv.Itoa(n)
	}
	<-loadDone
	res := trialResult{fault: f.name, trial: trial, detail: strings.TrimSpace(fmt.Sprintf("%s at %s, lasted %s, %s applications in storage as it ended", detail, at.Round(time.Millisecond), healed.Sub(faultStart).Round(time.Millisecond), progress))}
	res.failed = missed.what != ""
	cnt, err := awaitApplied(ctx, c, l, recoveryLimit)
	res.recovery = time.Since(healed)
	_, _, _, retryable, wrong := l.snapshot()
	res.retryable, res.wrong = retryable, len(wrong)
	res.counts = cnt
	for i, w := range wrong {
		if i == 5 {
			t.Logf("... %d more wrong answers", len(wrong)-5)
			break
		}
		t.Logf("wrong answer: %s", w)
	}
	if err != nil {
		t.Errorf("%s trial %d: %v", f.name, trial, err)
		res.failed = true
		logLost(t, ctx, c, l)
	}
	l.mu.Lock()
	unknown := l.unknown
	l.mu.Unlock()
	t.Logf("%s: accepted %d, applied %d, lost %d (dead-lettered %d), twice %d, out of order %d, ambiguous %d, retryable errors %d, unknown outcomes %d, wrong answers %d, recovered in %s",
		res.detail, cnt.Accepted, cnt.Applied, cnt.Lost, cnt.DeadLettered, cnt.Twice, cnt.OutOfOrder, cnt.Ambiguous, res.retryable, unknown, res.wrong, res.recovery.Round(time.Millisecond))
	res.load = l
	if n := c.appliedDeadLetters(ctx, l); n > 0 {
		res.counts.DeadApplied = n
		t.Errorf("%s trial %d: %d dead letters of mutations that were applied (a replay would apply them twice)", f.name, trial, n)
	}
	return res
}

// logLost lists the first missing mutations of l with their mutation ids,
// which the containers' logs (saved when the test fails) name.
func logLost(t *testing.T, ctx context.Context, c *cluster, l *load) {
	acked, _, _, _, _ := l.snapshot()
	applied, err := l.applied(ctx, c.client)
	if err != nil {
		return
	}
	ids := map[seqRef]string{}
	for id, r := range l.mutationIDs() {
		ids[r] = id
	}
	lost := slices.SortedFunc(maps.Keys(lostSeqs(acked, applied)), func(a, b seqRef) int {
		return cmp.Or(strings.Compare(a.key, b.key), a.seq-b.seq)
	})
	for i, r := range lost {
		if i == 20 {
			t.Logf("... %d more missing", len(lost)-i)
			break
		}
		t.Logf("missing: record %s, %s, mutation %s", r.key, seqID(r.seq), ids[r])
	}
}

// awaitApplied polls storage (through the server) until every acknowledged
// mutation of the load is applied, and returns the counts; after limit it
// returns the counts with the lost ones and an error. It stops early when
// every missing mutation was dead-lettered by a worker (it will not come).
func awaitApplied(ctx context.Context, c *cluster, l *load, limit time.Duration) (counts, error) {
	deadline := time.Now().Add(limit)
	var cnt counts
	var last error
	var lastLogCheck time.Time
	var lastAcked, lastApplied map[string][]int
	deadLettered := func(acked, applied map[string][]int) int {
		dl := c.deadLettered(l.mutationIDs())
		n := 0
		for r := range lostSeqs(acked, applied) {
			if dl[r] {
				n++
			}
		}
		return n
	}
	for {
		acked, failed, sent, _, _ := l.snapshot()
		applied, err := l.applied(ctx, c.client)
		if err == nil {
			cnt = analyze(acked, failed, applied, sent)
			if cnt.Lost == 0 {
				return cnt, nil
			}
			lastAcked, lastApplied = acked, applied
			last = fmt.Errorf("%d of %d acknowledged mutations not applied", cnt.Lost, cnt.Accepted)
			if time.Since(lastLogCheck) > 2*time.Second {
				lastLogCheck = time.Now()
				if n := deadLettered(acked, applied); n == cnt.Lost {
					cnt.DeadLettered = n
					return cnt, fmt.Errorf("%d of %d acknowledged mutations were dead-lettered by the workers, not applied", n, cnt.Accepted)
				}
			}
		} else {
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if lastApplied == nil {
				cnt.Lost = cnt.Accepted // nothing could be read: no mutation is confirmed
			} else {
				cnt.DeadLettered = deadLettered(lastAcked, lastApplied)
			}
			return cnt, fmt.Errorf("not recovered within %s (%d of the missing were dead-lettered): %w", limit, cnt.DeadLettered, last)
		}
		time.Sleep(250 * time.Millisecond) // polling storage: no event to await
	}
}

// renderTable is the reliability table of docs/reliability.md: one row per fault with
// totals over its trials, and the machine it ran on.
func renderTable(results []trialResult, dbKind string, requireOnce bool, took time.Duration) string {
	type agg struct {
		trials, failedTrials                                                   int
		accepted, applied, lost, dead, twice, ooo, ambiguous, retryable, wrong int
		deadApplied                                                            int
		rec                                                                    []time.Duration
	}
	byFault := map[string]*agg{}
	na := map[string]bool{}
	for _, r := range results {
		if r.na {
			na[r.fault] = true
			continue
		}
		a := byFault[r.fault]
		if a == nil {
			a = &agg{}
			byFault[r.fault] = a
		}
		a.trials++
		if r.failed {
			a.failedTrials++
		}
		a.accepted += r.counts.Accepted
		a.applied += r.counts.Applied
		a.lost += r.counts.Lost
		a.dead += r.counts.DeadLettered
		a.deadApplied += r.counts.DeadApplied
		a.twice += r.counts.Twice
		a.ooo += r.counts.OutOfOrder
		a.ambiguous += r.counts.Ambiguous
		a.retryable += r.retryable
		a.wrong += r.wrong
		a.rec = append(a.rec, r.recovery)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Database: %s\n\n", dbKind)
	fmt.Fprintf(&b, "| Fault | Trials | Accepted | Applied | Lost (dead-lettered) | Applied twice | Out of order | Dead letters of applied | Recovery median / max | Client: retryable errors | Client: wrong answers |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, name := range strings.Split(allFaults, ",") {
		a := byFault[name]
		if a == nil {
			if na[name] {
				fmt.Fprintf(&b, "| %s | n/a | | | | | | | | | |\n", name)
			}
			continue
		}
		sort.Slice(a.rec, func(i, j int) bool { return a.rec[i] < a.rec[j] })
		med, mx := a.rec[len(a.rec)/2], a.rec[len(a.rec)-1]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d) | %d | %d | %d | %s / %s | %d | %d |\n", name, a.trials, a.accepted, a.applied, a.lost, a.dead, a.twice, a.ooo, a.deadApplied,
			med.Round(100*time.Millisecond), mx.Round(100*time.Millisecond), a.retryable, a.wrong)
	}
	for _, f := range faults() {
		switch {
		case byFault[f.name] != nil:
			fmt.Fprintf(&b, "\n- %s: %s", f.name, f.describe)
		case na[f.name]:
			fmt.Fprintf(&b, "\n- %s: %s; n/a: it applies to %s only", f.name, f.describe, f.only)
		}
	}
	b.WriteString("\n")
	cpu := cpuModel()
	membership := "dynamic"
	if os.Getenv(envStatic) == "1" {
		membership = "static (SINK_KAFKA_INSTANCE_ID)"
	}
	fmt.Fprintf(&b, "\nRan on %s, %d cores, %s/%s, Docker Engine %s; database: %s; broker: kfake (franz-go) FROM scratch; 2 workers (%s group membership), 4 partitions; %d records x %d sequenced counter merges per trial; effectively-once required: %v; suite took %s.\n",
		cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, dockerVersion(), dbKind, membership, loadRecords, loadPerRecord, requireOnce, took.Round(time.Second))
	return b.String()
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func dockerVersion() string {
	if suite.eng == nil {
		return "?"
	}
	env, err := suite.eng.dc.Version()
	if err != nil {
		return "?"
	}
	return env.Get("Version")
}

// suiteRand is the random source of the fault points: seeded from
// SINK_FAULTS_SEED, or from the clock (logged, to repeat a run).
func suiteRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s: %v", envSeed, err)
		}
	}
	t.Logf("seed %d (%s=%d repeats the fault points)", seed, envSeed, seed)
	return rand.New(rand.NewPCG(seed, seed>>1|1))
}

// warmCluster starts the cluster (its containers' logs are saved when the
// test fails) and waits until the workers have joined the group and
// apply; the caller closes it.
func warmCluster(t *testing.T, ctx context.Context, e *engine) *cluster {
	t.Helper()
	t0 := time.Now()
	c, err := startCluster(ctx, e, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s: %s, kfake broker, Sink server and 2 workers, FROM scratch images", time.Since(t0).Round(time.Millisecond), c.dbKind)
	t.Cleanup(func() {
		if t.Failed() {
			c.saveLogs(t)
		}
	})
	warm := newLoad("warmup", 4, 5, 10*time.Millisecond, false)
	warm.run(ctx, c.client)
	if _, err := awaitApplied(ctx, c, warm, 60*time.Second); err != nil {
		c.close()
		t.Fatalf("warm-up: %v", err)
	}
	return c
}
