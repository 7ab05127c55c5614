package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	dc "github.com/ory/dockertest/v3/docker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const (
	topic          = "sink.mutations"
	deadLetter     = "sink.mutations.dead-letter"
	partitions     = 4
	sessionTimeout = 6 * time.Second // kfake's minimum group session timeout
	// dbURI: timeouts shorter than the database pause of the db-pause fault.
	dbURI = "mongodb://db:27017/?serverSelectionTimeoutMS=3000&connectTimeoutMS=2000&timeoutMS=5000"
	// dbURIMongo: the same against a real MongoDB replica set.
	dbURIMongo = "mongodb://db:27017/?replicaSet=rs0&serverSelectionTimeoutMS=3000&connectTimeoutMS=2000&timeoutMS=5000"
)

// cluster is the Sink deployment under test: a database, a broker, one
// server (its gRPC port published on loopback) and two workers, on two
// networks: "data" (database, server, workers) and "log" (broker, server,
// workers), so that a worker can be cut off from the broker alone.
type cluster struct {
	e       *engine
	dataNet *dc.Network
	logNet  *dc.Network
	db      *container
	broker  *container
	server  *container
	workers []*container
	dbKind  string
	port    int
	dbURI   string
	// database is dbMongo or dbPostgres; pgPort is PostgreSQL's published
	// loopback port (the test process terminates backends through it).
	database string
	pgPort   int
	// sinkSource is the tree Sink was built from.
	sinkSource string
	conn       *grpc.ClientConn
	client     sinkv1.SinkClient
	// exited lists the workers that exited on their own (not by a fault)
	// and were started again before the next trial (awaitWorkers).
	exited []string
}

// startCluster builds the binaries and images and starts the deployment.
func startCluster(ctx context.Context, e *engine, logf func(string, ...any)) (*cluster, error) {
	root, err := testkit.RepoRoot()
	if err != nil {
		return nil, err
	}
	bins, err := os.MkdirTemp("", "sink-faults-bin-")
	if err != nil {
		return nil, fmt.Errorf("cannot create a build directory: %w", err)
	}
	defer os.RemoveAll(bins)
	database, err := faultsDB()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	// SINK_FAULTS_SINK_SOURCE builds Sink from another tree (for example an
	// export of a commit, to compare with the working tree).
	sinkSource := root
	if v := os.Getenv(envSinkSource); v != "" {
		sinkSource = v
	}
	if err := staticBinary(ctx, sinkSource, "./integration/cmd/sinkcount", filepath.Join(bins, "sink")); err != nil {
		return nil, err
	}
	if err := staticBinary(ctx, root, "./internal/testkit/cmd/kfakebroker", filepath.Join(bins, "kfakebroker")); err != nil {
		return nil, err
	}
	ferret, err := ferretBinary(ctx, root)
	if err != nil {
		return nil, err
	}
	logf("faults: built static binaries in %s", time.Since(t0).Round(time.Millisecond))

	sinkImage, err := e.buildImage("sink", filepath.Join(bins, "sink"), nil)
	if err != nil {
		return nil, err
	}
	brokerImage, err := e.buildImage("kfakebroker", filepath.Join(bins, "kfakebroker"), nil)
	if err != nil {
		return nil, err
	}
	ferretImage, err := e.buildImage("ferretdb", ferret, nil)
	if err != nil {
		return nil, err
	}

	c := &cluster{e: e, dbKind: "FerretDB v1.24.2 (SQLite), FROM scratch", sinkSource: sinkSource, database: database}
	if c.dataNet, err = e.network("data"); err != nil {
		return nil, err
	}
	if c.logNet, err = e.network("log"); err != nil {
		return nil, err
	}
	// A real MongoDB where its image is present (docker pull mongo:7 first;
	// the suite never pulls), else FerretDB; or PostgreSQL (SINK_FAULTS_DB).
	mongoImage := os.Getenv(envMongoImage)
	if mongoImage == "" {
		mongoImage = "mongo:7"
	}
	if database == dbPostgres {
		t1 := time.Now()
		pgImage, version, err := e.buildPostgresImage(ctx)
		if err != nil {
			return nil, err
		}
		logf("faults: built the PostgreSQL image (%s) in %s", version, time.Since(t1).Round(time.Millisecond))
		c.dbKind, c.dbURI = version+", installed binaries FROM scratch", pgSinkURL()
		if c.db, c.pgPort, err = startPostgres(ctx, e, pgImage, c.dataNet.ID); err != nil {
			return nil, err
		}
	} else if _, err := e.dc.InspectImage(mongoImage); err == nil {
		c.dbKind, c.dbURI = mongoImage+" (single-node replica set)", dbURIMongo
		if c.db, err = startMongo(ctx, e, mongoImage, c.dataNet.ID); err != nil {
			return nil, err
		}
	} else {
		c.dbURI = dbURI
		c.db, err = e.start(containerSpec{
			role: "db", image: ferretImage,
			cmd:      []string{"-listen", "0.0.0.0:27017", "-data", "/data/db", "-log-level", "error"},
			networks: map[string][]string{c.dataNet.ID: {"db"}},
		})
		if err != nil {
			return nil, err
		}
	}
	c.broker, err = e.start(containerSpec{
		role: "broker", image: brokerImage,
		cmd: []string{"-port", "9092", "-listen-host", "0.0.0.0", "-advertise-host", "broker",
			"-data", "/data/kafka", "-partitions", strconv.Itoa(partitions), "-topics", topic + "," + deadLetter},
		networks: map[string][]string{c.logNet.ID: {"broker"}},
	})
	if err != nil {
		return nil, err
	}
	if c.dbURI == dbURI {
		if err := c.db.awaitLog(ctx, "READY ", 1, 60*time.Second); err != nil {
			return nil, err
		}
	}
	if err := c.broker.awaitLog(ctx, "READY ", 1, 30*time.Second); err != nil {
		return nil, err
	}

	if c.port, err = freePort(); err != nil {
		return nil, err
	}
	both := map[string][]string{c.dataNet.ID: nil, c.logNet.ID: nil}
	// The HTTP operations endpoints are published too (metrics for the
	// soak's samples).
	httpPorts := make([]int, 3)
	for i := range httpPorts {
		if httpPorts[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	c.server, err = e.start(containerSpec{
		role: "server", image: sinkImage, env: c.sinkEnv("server"), networks: both,
		publish: map[string]int{"8080/tcp": c.port, "8081/tcp": httpPorts[0]},
	})
	if err != nil {
		return nil, err
	}
	c.server.httpPort = httpPorts[0]
	for i := 1; i <= 2; i++ {
		w, err := e.start(containerSpec{
			role: "worker" + strconv.Itoa(i), image: sinkImage, env: c.workerEnv("worker" + strconv.Itoa(i)),
			networks: map[string][]string{c.dataNet.ID: nil, c.logNet.ID: nil},
			publish:  map[string]int{"8081/tcp": httpPorts[i]},
		})
		if err != nil {
			return nil, err
		}
		w.httpPort = httpPorts[i]
		c.workers = append(c.workers, w)
	}
	c.conn, err = grpc.NewClient("127.0.0.1:"+strconv.Itoa(c.port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("cannot create the gRPC client: %w", err)
	}
	c.client = sinkv1.NewSinkClient(c.conn)
	if err := c.awaitServing(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// sinkEnv is the environment of a Sink container.
func (c *cluster) sinkEnv(mode string) []string {
	env := []string{
		"SINK_MODE=" + mode,
		"SINK_KAFKA_BROKERS=broker:9092",
		"SINK_KAFKA_TOPIC=" + topic,
		"SINK_KAFKA_GROUP_ID=sink-workers",
		"SINK_KAFKA_SESSION_TIMEOUT=" + sessionTimeout.String(),
		// A killed worker's replacement joins the group under a new member
		// id, and the rebalance that follows can wait for the dead member
		// up to this timeout (with the 60s default, recovery after a kill
		// took 66-71s in some trials). It is also kept below kgo's request
		// timeout overhead (10s): kfake resets a preparing rebalance's
		// deadline at every JoinGroup (real Kafka does not), and a worker's
		// JoinGroup times out after the rebalance timeout + 10s. With 24s,
		// two workers whose joins arrived more than 10s apart kept timing
		// each other out (a clean-clone run applied nothing for minutes
		// after a kill). Below 10s a second join always comes within the
		// first's timeout. SINK_APPLY_MAX_BACKOFF must be at most R/12.
		"SINK_KAFKA_REBALANCE_TIMEOUT=9s",
		"SINK_KAFKA_PUBLISH_TIMEOUT=3s",
		"SINK_KAFKA_MAX_POLL_RECORDS=100",
		"SINK_APPLY_MAX_BACKOFF=500ms",
		"SINK_SHUTDOWN_TIMEOUT=20s",
		"SINK_LOG_FORMAT=text",
		"SINK_LOG_LEVEL=" + logLevel(),
	}
	if c.database == dbPostgres {
		env = append(env, "SINK_POSTGRES_URL="+c.dbURI)
	} else {
		env = append(env, "SINK_MONGODB_URI="+c.dbURI)
	}
	if c.dbURI == dbURI {
		// FerretDB v1 limits (see mongotest.Server.SinkEnv).
		env = append(env, "SINK_MONGODB_BULK_CHUNK=48", "SINK_MONGODB_BULK_CONCURRENCY=1")
	}
	return env
}

// workerEnv is the environment of the worker container role: with
// SINK_FAULTS_STATIC=1 a static group member named after its role, which
// a restarted container takes up again.
func (c *cluster) workerEnv(role string) []string {
	env := c.sinkEnv("worker")
	if os.Getenv(envStatic) == "1" {
		env = append(env, "SINK_KAFKA_INSTANCE_ID=sink-"+role)
	}
	return env
}

// logLevel is the containers' SINK_LOG_LEVEL: SINK_FAULTS_LOG_LEVEL or warn.
func logLevel() string {
	if v := os.Getenv(envLogLevel); v != "" {
		return v
	}
	return "warn"
}

func (c *cluster) close() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
}

// awaitServing waits until the server's gRPC health check answers SERVING.
func (c *cluster) awaitServing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		hr, err := healthpb.NewHealthClient(c.conn).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && hr.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the server is not serving after %s (%v); its log:\n%s", limit, last, c.server.logs(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitWorkers waits, before a trial, until every worker runs and is
// ready (/readyz of its published HTTP endpoint). A worker that exited on
// its own — a worker started again by a fault exits when its database
// does not answer its start-up ping within SINK's connect timeout (15 s),
// as when the next trial pauses the database on a busy machine — is
// started again, as the deployment's restart policy (restart:
// unless-stopped, deploy/compose.yaml) does, and recorded in exited with
// its last log line: otherwise every later fault of that worker fails to
// inject and the cluster runs on with one worker.
func (c *cluster) awaitWorkers(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, w := range c.workers {
		for {
			st, err := c.e.dc.InspectContainer(w.id)
			if err != nil {
				return fmt.Errorf("cannot inspect %s: %w", w.role, err)
			}
			if !st.State.Running && !st.State.Paused {
				c.exited = append(c.exited, fmt.Sprintf("%s (exit code %d: %s)", w.role, st.State.ExitCode, lastLines(w.logs(1), 1)))
				if err := w.restart(); err != nil {
					return err
				}
			} else if w.ready(ctx) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s is not ready after %s; its log:\n%s", w.role, limit, w.logs(30))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// ready reports whether the container's /readyz answers 200.
func (c *container) ready(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(c.httpPort)+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// saveLogs writes every container's whole log to a directory that outlives
// the run (the containers do not) and logs where it is.
func (c *cluster) saveLogs(t interface{ Logf(string, ...any) }) {
	dir, err := os.MkdirTemp("", "sink-faults-logs-")
	if err != nil {
		t.Logf("cannot keep the container logs: %v", err)
		return
	}
	for _, ct := range append([]*container{c.db, c.broker, c.server}, c.workers...) {
		if err := os.WriteFile(filepath.Join(dir, ct.role+".log"), []byte(ct.logs(1000000)), 0o644); err != nil {
			t.Logf("cannot keep the log of %s: %v", ct.role, err)
		}
	}
	t.Logf("the containers' logs are in %s", dir)
}

var deadLetterLine = regexp.MustCompile(`dead-lettering it.*\bmutation_id=([0-9A-Za-z-]+)`)

// deadLettered returns which of the given mutations (by id) a worker's log
// says it dead-lettered.
func (c *cluster) deadLettered(ids map[string]seqRef) map[seqRef]bool {
	out := map[seqRef]bool{}
	for _, w := range c.workers {
		for _, m := range deadLetterLine.FindAllStringSubmatch(w.logs(100000), -1) {
			if r, ok := ids[m[1]]; ok {
				out[r] = true
			}
		}
	}
	return out
}

// appliedDeadLetters counts the mutations of l that a worker dead-lettered
// (by its logs) although storage holds them applied.
func (c *cluster) appliedDeadLetters(ctx context.Context, l *load) int {
	dl := c.deadLettered(l.mutationIDs())
	if len(dl) == 0 {
		return 0
	}
	applied, err := l.applied(ctx, c.client)
	if err != nil {
		return 0
	}
	n := 0
	for r := range dl {
		if slices.Contains(applied[r.key], r.seq) {
			n++
		}
	}
	return n
}

// awaitLog waits until the container's output holds the line prefix at
// least n times (READY lines: one per start).
func (c *container) awaitLog(ctx context.Context, prefix string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		logs := c.logs(1000)
		if countLines(logs, prefix) >= n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not print %q %d times within %s; log:\n%s", c.role, prefix, n, limit, lastLines(logs, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countLines(s, prefix string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startMongo starts a MongoDB image as the single-node replica set rs0 whose
// member is db:27017 (the name the Sink containers use), initiating it
// through a loopback port.
func startMongo(ctx context.Context, e *engine, image, network string) (*container, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	db, err := e.start(containerSpec{
		role: "db", image: image,
		cmd:      []string{"mongod", "--replSet", "rs0", "--bind_ip_all", "--port", "27017"},
		networks: map[string][]string{network: {"db"}},
		publish:  map[string]int{"27017/tcp": port},
	})
	if err != nil {
		return nil, err
	}
	rsCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := mongotest.InitiateReplicaSet(rsCtx, "127.0.0.1:"+strconv.Itoa(port), "rs0", "db:27017"); err != nil {
		return nil, fmt.Errorf("%s did not become a writable primary: %w; log:\n%s", image, err, lastLines(db.logs(40), 40))
	}
	return db, nil
}
