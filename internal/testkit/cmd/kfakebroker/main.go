// Command kfakebroker runs franz-go's fake Kafka cluster (kfake) as a
// standalone broker process on loopback, for tests that need a broker which
// can be stopped, killed and restarted on the same address.
//
//	kfakebroker -port 9092 [-data DIR] [-brokers 1] [-partitions 1] [-topics a,b]
//	            [-auto-create-topics=true] [-sync] [-min-session-timeout 6s]
//	            [-log-level none] [-parent-pid PID]
//	            [-listen-host 0.0.0.0 -advertise-host NAME]
//
// With -brokers N the brokers listen on 127.0.0.1:PORT .. 127.0.0.1:PORT+N-1.
// In a container, -listen-host 0.0.0.0 -advertise-host NAME listens on every
// interface and tells clients (metadata, coordinators, READY) to dial NAME.
// Once every broker accepts connections it prints exactly one line on stdout:
//
//	READY 127.0.0.1:PORT[,127.0.0.1:PORT+1...]
//
// On SIGTERM or SIGINT it closes the cluster cleanly (with -data this flushes
// and fsyncs the persisted state) and exits 0. A second signal during the
// shutdown forces exit status 1.
//
// Persistence (-data): kfake writes every produced batch and every offset
// commit to the data dir with a plain write(2) as it happens, so they survive
// SIGKILL of this process (they sit in the OS page cache); only an OS crash
// or power loss can lose unsynced writes, unless -sync is given. Topics made
// by CreateTopics or -topics are persisted at once too. Topics that a
// Metadata request auto-creates are not persisted by kfake until a clean
// close (they would vanish, records and all, on SIGKILL); this command
// creates them through the persisting path first, so they survive too.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		port       = flag.Int("port", 0, "loopback port of the first broker (required); broker i listens on port+i")
		dataDir    = flag.String("data", "", "persistence directory (state survives restarts); empty keeps everything in memory")
		brokers    = flag.Int("brokers", 1, "number of brokers")
		partitions = flag.Int("partitions", 1, "partitions of seed topics and of auto-created topics")
		topics     = flag.String("topics", "", "comma-separated topics to create at start (missing ones are created on a restart with -data too)")
		autoCreate = flag.Bool("auto-create-topics", true, "allow clients to auto-create topics through metadata requests")
		syncWrites = flag.Bool("sync", false, "fsync every write (slower; only matters for OS crashes)")
		minSession = flag.Duration("min-session-timeout", 0, "group minimum session timeout (0 keeps kfake's default of 6s)")
		logLevel   = flag.String("log-level", "none", "kfake log level on stderr: none, error, warn, info, debug")
		parentPID  = flag.Int("parent-pid", 0, "exit at once (no clean close) when this process stops being our parent")
		listenHost = flag.String("listen-host", "127.0.0.1", "host or IP the brokers listen on (0.0.0.0 in a container)")
		advertise  = flag.String("advertise-host", "", "host name the brokers advertise to clients (default: the listen address)")
	)
	flag.Parse()

	if *port <= 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "kfakebroker: -port is required (1..65535)")
		flag.Usage()
		return 2
	}
	if *brokers < 1 || *port+*brokers-1 > 65535 {
		fmt.Fprintln(os.Stderr, "kfakebroker: -brokers must be >= 1 and ports must stay <= 65535")
		return 2
	}
	if *partitions < 1 {
		fmt.Fprintln(os.Stderr, "kfakebroker: -partitions must be >= 1")
		return 2
	}

	if *parentPID > 0 {
		go watchParent(*parentPID)
	}

	var lvl kfake.LogLevel
	switch strings.ToLower(*logLevel) {
	case "none", "":
		lvl = kfake.LogLevelNone
	case "error":
		lvl = kfake.LogLevelError
	case "warn":
		lvl = kfake.LogLevelWarn
	case "info":
		lvl = kfake.LogLevelInfo
	case "debug":
		lvl = kfake.LogLevelDebug
	default:
		fmt.Fprintf(os.Stderr, "kfakebroker: unknown -log-level %q\n", *logLevel)
		return 2
	}

	ports := make([]int, *brokers)
	for i := range ports {
		ports[i] = *port + i
	}
	opts := []kfake.Opt{
		kfake.Ports(ports...),
		kfake.DefaultNumPartitions(*partitions),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, lvl)),
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if *minSession > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(*minSession))
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if *listenHost != "127.0.0.1" || *advertise != "" {
		opts = append(opts, kfake.ListenFn(listenAdvertising(*listenHost, *advertise)))
	}

	// Install the handler before the cluster exists so that a signal sent
	// right after READY is never lost to the default (non-flushing) action.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakebroker: starting cluster: %v\n", err)
		return 1
	}

	if *autoCreate && *dataDir != "" {
		persistAutoCreatedTopics(c)
	}

	addrs := c.ListenAddrs()
	for _, a := range addrs {
		if err := waitAccepting(dialAddr(a, *listenHost, *advertise), 10*time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "kfakebroker: %v\n", err)
			c.Close()
			return 1
		}
	}
	// Not kfake.SeedTopics: it applies only to a fresh data dir, while this
	// also creates requested topics missing from persisted state.
	if err := ensureTopics(c, splitList(*topics), int32(*partitions)); err != nil {
		fmt.Fprintf(os.Stderr, "kfakebroker: %v\n", err)
		c.Close()
		return 1
	}
	// The reaper's heartbeats for members waiting in JoinGroup must come
	// well within the shortest session timeout the group accepts.
	tick := time.Second
	if *minSession > 0 {
		tick = min(tick, *minSession/3)
	}
	startReaper(c, dialAddr(addrs[0], *listenHost, *advertise), tick)
	fmt.Printf("READY %s\n", strings.Join(addrs, ","))
	os.Stdout.Sync() //nolint:errcheck // a pipe or terminal; best effort

	sig := <-sigs
	fmt.Fprintf(os.Stderr, "kfakebroker: %v: closing cluster\n", sig)
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
		return 0
	case sig = <-sigs:
		fmt.Fprintf(os.Stderr, "kfakebroker: %v again: forced exit without clean close\n", sig)
		return 1
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// waitAccepting dials addr until a TCP connection succeeds, proving the
// listener is bound and the broker's accept loop is reachable.
func waitAccepting(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %s does not accept connections: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ensureTopics creates the given topics with the given partition count
// unless they exist already. CreateTopic persists topics.json at once.
func ensureTopics(c *kfake.Cluster, topics []string, partitions int32) error {
	for _, t := range topics {
		if err := c.CreateTopic(t, partitions, nil); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", t, err)
		}
	}
	return nil
}

// watchParent exits the process, like SIGKILL would, once the process that
// started us is gone (we get re-parented), so that a test broker never
// outlives its test even where Pdeathsig is unavailable.
func watchParent(pid int) {
	for {
		if os.Getppid() != pid {
			fmt.Fprintf(os.Stderr, "kfakebroker: parent %d is gone: exiting\n", pid)
			os.Exit(1)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// persistAutoCreatedTopics works around a kfake gap: a topic that a Metadata
// request auto-creates is not written to topics.json until the cluster
// closes cleanly, so after a SIGKILL the topic and all its records are gone
// (its segment files stay on disk, unreferenced). Before kfake handles a
// Metadata request that may auto-create topics, we create the missing ones
// through Cluster.CreateTopic, which persists topics.json at once, then let
// kfake answer the request as usual.
func persistAutoCreatedTopics(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req, ok := kreq.(*kmsg.MetadataRequest)
		if !ok || !req.AllowAutoTopicCreation {
			return nil, nil, false
		}
		var topics []string
		for _, rt := range req.Topics {
			if rt.Topic != nil && *rt.Topic != "" {
				topics = append(topics, *rt.Topic)
			}
		}
		if len(topics) == 0 {
			return nil, nil, false
		}
		// CreateTopic goes through the cluster's run loop, which this
		// control function occupies; SleepControl frees the loop while it
		// runs. Existing topics answer TOPIC_ALREADY_EXISTS, invalid names
		// an error: kfake's own handling of the request then applies.
		c.SleepControl(func() {
			for _, t := range topics {
				_ = c.CreateTopic(t, 0, nil) // 0: the -partitions default
			}
		})
		return nil, nil, false // not handled: kfake answers the request
	})
}

// listenAdvertising listens on host (instead of kfake's 127.0.0.1) and, with
// an advertise host, reports that host as the listener's address, which is
// what kfake tells clients to dial.
func listenAdvertising(host, advertise string) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("cannot split listen address %q: %w", address, err)
		}
		l, err := net.Listen(network, net.JoinHostPort(host, port))
		if err != nil || advertise == "" {
			return l, err
		}
		return advertisedListener{Listener: l, addr: advertisedAddr(net.JoinHostPort(advertise, port))}, nil
	}
}

type advertisedListener struct {
	net.Listener
	addr advertisedAddr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// dialAddr is where this process checks that a broker accepts connections:
// its own listener, not the advertised name.
func dialAddr(addr, listenHost, advertise string) string {
	if advertise == "" {
		return addr
	}
	_, port, _ := net.SplitHostPort(addr)
	switch listenHost {
	case "", "0.0.0.0", "::", "[::]":
		listenHost = "127.0.0.1"
	}
	return net.JoinHostPort(listenHost, port)
}
