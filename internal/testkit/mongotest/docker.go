package mongotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

const (
	dockerRepository = "mongo"
	dockerTag        = "7"
	dockerReplSet    = "rs0"

	dockerPingTimeout  = 3 * time.Second
	dockerDefaultPull  = 2 * time.Minute
	dockerPullIdle     = 30 * time.Second
	dockerReadyTimeout = 90 * time.Second
	// dockerMaxLifetime is a safety net that needs no help from the test
	// process: mongod runs under timeout(1), so even if the test binary is
	// killed the container exits (and is auto-removed) after this long.
	dockerMaxLifetime = "7200"
)

// dockerServer is a mongo:7 container running a single-node replica set.
type dockerServer struct {
	pool *dockertest.Pool
	res  *dockertest.Resource
	uri  string

	once sync.Once
	err  error
}

// startDocker starts mongo:7 as a single-node replica set, or returns quickly
// with the reason why it can't (no engine, no image and no pull).
func startDocker(ctx context.Context, logf func(string, ...any)) (*dockerServer, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("no Docker client: %w", err)
	}

	pingCtx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	err = pool.Client.PingWithContext(pingCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("no Docker engine answers at %s: %w", pool.Client.Endpoint(), err)
	}

	image := dockerRepository + ":" + dockerTag
	if _, err := pool.Client.InspectImage(image); err != nil {
		pullTimeout := dockerDefaultPull
		if v := os.Getenv(EnvDockerPullTimeout); v != "" {
			if d, perr := time.ParseDuration(v); perr == nil {
				pullTimeout = d
			}
		}
		logf("mongotest: image %s is not present (%v); pulling (timeout %s)", image, err, pullTimeout)
		pullCtx, cancel := context.WithTimeout(ctx, pullTimeout)
		err = pool.Client.PullImage(dc.PullImageOptions{
			Repository:        dockerRepository,
			Tag:               dockerTag,
			Context:           pullCtx,
			InactivityTimeout: dockerPullIdle,
		}, dc.AuthConfiguration{})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("image %s is not present and cannot be pulled: %w", image, err)
		}
	}

	// mongod listens on the same port inside and outside the container, and the
	// replica set member is 127.0.0.1:port, so drivers on the host that discover
	// the replica set reach the member through the published port.
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ps := strconv.Itoa(port)
	name := fmt.Sprintf("sink-mongotest-%d-%s", os.Getpid(), randomHex(4))
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Name:         name,
		Repository:   dockerRepository,
		Tag:          dockerTag,
		Entrypoint:   []string{"timeout", "-s", "KILL", dockerMaxLifetime, "docker-entrypoint.sh"},
		Cmd:          []string{"mongod", "--replSet", dockerReplSet, "--bind_ip_all", "--port", ps},
		ExposedPorts: []string{ps + "/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{
			dc.Port(ps + "/tcp"): {{HostIP: "127.0.0.1", HostPort: ps}},
		},
		Labels: map[string]string{"io.sink.mongotest": "1"},
	}, func(hc *dc.HostConfig) {
		hc.AutoRemove = true
		hc.PublishAllPorts = false
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		// RunWithOptions leaves a created container behind when starting it fails.
		_ = pool.RemoveContainerByName(name)
		return nil, fmt.Errorf("starting container: %w", err)
	}
	d := &dockerServer{pool: pool, res: res, uri: "mongodb://127.0.0.1:" + ps + "/"}

	readyCtx, cancel := context.WithTimeout(ctx, dockerReadyTimeout)
	defer cancel()
	if err := InitiateReplicaSet(readyCtx, "127.0.0.1:"+ps, dockerReplSet, "127.0.0.1:"+ps); err != nil {
		_ = d.close()
		return nil, fmt.Errorf("initiating replica set in container %s: %w", name, err)
	}
	return d, nil
}

// InitiateReplicaSet makes the mongod at addr (host:port) the only member,
// host, of the replica set name: it runs replSetInitiate through a direct
// connection (a set already initiated is fine) and waits until the node is a
// writable primary or ctx ends.
func InitiateReplicaSet(ctx context.Context, addr, name, host string) error {
	client, err := mongo.Connect(options.Client().
		ApplyURI("mongodb://" + addr + "/?directConnection=true").
		SetServerSelectionTimeout(2 * time.Second).
		SetConnectTimeout(2 * time.Second))
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", addr, err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()

	admin := client.Database("admin")
	initiate := bson.D{{Key: "replSetInitiate", Value: bson.D{
		{Key: "_id", Value: name},
		{Key: "members", Value: bson.A{bson.D{{Key: "_id", Value: 0}, {Key: "host", Value: host}}}},
	}}}

	initiated := false
	var last error
	for {
		if !initiated {
			err := admin.RunCommand(ctx, initiate).Err()
			var ce mongo.CommandError
			switch {
			case err == nil:
				initiated = true
			case errors.As(err, &ce) && (ce.Code == 23 || ce.Name == "AlreadyInitialized"):
				initiated = true
			default:
				last = err
			}
		}
		if initiated {
			var hello struct {
				IsWritablePrimary bool `bson:"isWritablePrimary"`
			}
			err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
			switch {
			case err != nil:
				last = err
			case hello.IsWritablePrimary:
				return nil
			default:
				last = errors.New("node is not primary yet")
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// close removes the container (idempotent).
func (d *dockerServer) close() error {
	d.once.Do(func() {
		d.err = d.pool.Purge(d.res)
		var nf *dc.NoSuchContainer
		if errors.As(d.err, &nf) {
			d.err = nil // already gone (AutoRemove)
		}
	})
	return d.err
}

// freePort returns a currently free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
