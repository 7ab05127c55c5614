package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// Labels on everything the suite creates: the label that marks the suite's
// objects, the run that created them and the pid of the test process (a
// later run sweeps objects whose process is gone).
const (
	labelSuite = "io.sink.faults"
	labelRun   = "io.sink.faults.run"
	labelPID   = "io.sink.faults.pid"
)

// engine is the Docker client and the run's identity. Creation and cleanup
// are serialized: once cleanup has begun (an interrupt), nothing new is
// created, so nothing can appear after the sweep.
type engine struct {
	pool  *dockertest.Pool
	dc    *dc.Client
	run   string
	mu    sync.Mutex
	done  bool
	built []string // image names
}

// connectEngine returns a client of a Docker engine that answers, or an
// error saying why there is none.
func connectEngine() (*engine, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("cannot create a Docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("no Docker engine answers at %s: %w", pool.Client.Endpoint(), err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &engine{pool: pool, dc: pool.Client, run: strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)}, nil
}

func (e *engine) labels() map[string]string {
	return map[string]string{labelSuite: "1", labelRun: e.run, labelPID: strconv.Itoa(os.Getpid())}
}

// name is a Docker object name unique to this run.
func (e *engine) name(part string) string { return "sink-faults-" + e.run + "-" + part }

var errClosing = errors.New("the fault suite is shutting down")

// create runs f unless cleanup has begun, holding the lock.
func (e *engine) create(f func() error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return errClosing
	}
	return f()
}

// buildImage builds a FROM scratch image holding the binary as /bin/<name>
// (and empty /tmp and /data directories), labelled for this run.
func (e *engine) buildImage(name, binary string, entrypoint []string) (string, error) {
	dir, err := os.MkdirTemp("", "sink-faults-image-")
	if err != nil {
		return "", fmt.Errorf("cannot create the image context: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := copyFile(binary, filepath.Join(dir, name), 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{"tmp", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			return "", fmt.Errorf("cannot create %s: %w", d, err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, ".keep"), nil, 0o644); err != nil {
			return "", fmt.Errorf("cannot create %s: %w", d, err)
		}
	}
	ep := `["/bin/` + name + `"`
	for _, a := range entrypoint {
		ep += `,` + strconv.Quote(a)
	}
	ep += "]"
	df := "FROM scratch\nCOPY " + name + " /bin/" + name + "\nCOPY tmp /tmp\nCOPY data /data\nENTRYPOINT " + ep + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", fmt.Errorf("cannot write the Dockerfile: %w", err)
	}
	image := "sink-faults-" + name + ":" + e.run
	var out bytes.Buffer
	err = e.create(func() error {
		e.built = append(e.built, image)
		return e.dc.BuildImage(dc.BuildImageOptions{
			Name: image, ContextDir: dir, Labels: e.labels(), OutputStream: &out,
			RmTmpContainer: true, ForceRmTmpContainer: true, SuppressOutput: true,
		})
	})
	if err != nil {
		return "", fmt.Errorf("cannot build image %s: %w\n%s", image, err, out.String())
	}
	return image, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("cannot create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("cannot copy %s: %w", src, err)
	}
	return out.Close()
}

// network creates a bridge network labelled for this run.
func (e *engine) network(part string) (*dc.Network, error) {
	var n *dc.Network
	err := e.create(func() error {
		var err error
		n, err = e.dc.CreateNetwork(dc.CreateNetworkOptions{Name: e.name(part), Driver: "bridge", Labels: e.labels()})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create network %s: %w", part, err)
	}
	return n, nil
}

// container is one container of the suite.
type container struct {
	e    *engine
	id   string
	name string
	role string
	// httpPort is the loopback host port of its HTTP operations endpoint
	// (0: not published).
	httpPort int
}

type containerSpec struct {
	role     string
	image    string
	cmd      []string
	env      []string
	networks map[string][]string // network id → aliases (the first is created with, the others connected)
	publish  map[string]int      // container port "8080/tcp" → loopback host port
}

// start creates and starts a container.
func (e *engine) start(spec containerSpec) (*container, error) {
	c := &container{e: e, name: e.name(spec.role), role: spec.role}
	nets := make([]string, 0, len(spec.networks))
	for id := range spec.networks {
		nets = append(nets, id)
	}
	sort.Strings(nets)
	hc := &dc.HostConfig{RestartPolicy: dc.RestartPolicy{Name: "no"}, PortBindings: map[dc.Port][]dc.PortBinding{}}
	exposed := map[dc.Port]struct{}{}
	for p, hp := range spec.publish {
		exposed[dc.Port(p)] = struct{}{}
		hc.PortBindings[dc.Port(p)] = []dc.PortBinding{{HostIP: "127.0.0.1", HostPort: strconv.Itoa(hp)}}
	}
	err := e.create(func() error {
		created, err := e.dc.CreateContainer(dc.CreateContainerOptions{
			Name: c.name,
			Config: &dc.Config{
				Image: spec.image, Cmd: spec.cmd, Env: spec.env, Labels: e.labels(),
				ExposedPorts: exposed, Hostname: spec.role,
			},
			HostConfig: hc,
			NetworkingConfig: &dc.NetworkingConfig{EndpointsConfig: map[string]*dc.EndpointConfig{
				nets[0]: {Aliases: spec.networks[nets[0]]},
			}},
		})
		if err != nil {
			return err
		}
		c.id = created.ID
		for _, n := range nets[1:] {
			if err := e.dc.ConnectNetwork(n, dc.NetworkConnectionOptions{Container: c.id, EndpointConfig: &dc.EndpointConfig{Aliases: spec.networks[n]}}); err != nil {
				return err
			}
		}
		return e.dc.StartContainer(c.id, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("cannot start container %s: %w", spec.role, err)
	}
	return c, nil
}

// kill sends a signal to the container's process.
func (c *container) kill(sig syscall.Signal) error {
	if err := c.e.dc.KillContainer(dc.KillContainerOptions{ID: c.id, Signal: dc.Signal(sig)}); err != nil {
		return fmt.Errorf("cannot signal %s: %w", c.role, err)
	}
	return nil
}

// waitExit waits until the container is no longer running.
func (c *container) waitExit(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, err := c.e.dc.InspectContainer(c.id)
		if err != nil {
			return fmt.Errorf("cannot inspect %s: %w", c.role, err)
		}
		if !st.State.Running {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still runs %s after the signal", c.role, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart starts the (stopped) container again.
func (c *container) restart() error {
	return c.e.create(func() error {
		if err := c.e.dc.StartContainer(c.id, nil); err != nil {
			var already *dc.ContainerAlreadyRunning
			if !errors.As(err, &already) {
				return fmt.Errorf("cannot start %s again: %w", c.role, err)
			}
		}
		return nil
	})
}

func (c *container) pause() error {
	if err := c.e.dc.PauseContainer(c.id); err != nil {
		return fmt.Errorf("cannot pause %s: %w", c.role, err)
	}
	return nil
}

func (c *container) unpause() error {
	if err := c.e.dc.UnpauseContainer(c.id); err != nil {
		return fmt.Errorf("cannot unpause %s: %w", c.role, err)
	}
	return nil
}

func (c *container) disconnect(network string) error {
	if err := c.e.dc.DisconnectNetwork(network, dc.NetworkConnectionOptions{Container: c.id, Force: true}); err != nil {
		return fmt.Errorf("cannot disconnect %s: %w", c.role, err)
	}
	return nil
}

func (c *container) connect(network string, aliases ...string) error {
	return c.e.create(func() error {
		if err := c.e.dc.ConnectNetwork(network, dc.NetworkConnectionOptions{Container: c.id, EndpointConfig: &dc.EndpointConfig{Aliases: aliases}}); err != nil {
			return fmt.Errorf("cannot reconnect %s: %w", c.role, err)
		}
		return nil
	})
}

// logs returns the tail of the container's output.
func (c *container) logs(lines int) string {
	var out bytes.Buffer
	err := c.e.dc.Logs(dc.LogsOptions{Container: c.id, OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true, Tail: strconv.Itoa(lines)})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	return out.String()
}

// cleanup removes every container, network and image of this run, and
// forbids creating more. It is idempotent.
func (e *engine) cleanup() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done = true
	return sweep(e.dc, labelRun+"="+e.run, func(map[string]string) bool { return true }, e.built)
}

// sweepStale removes objects of earlier runs whose test process is gone.
func sweepStale(client *dc.Client) error {
	return sweep(client, labelSuite+"=1", func(l map[string]string) bool {
		pid, err := strconv.Atoi(l[labelPID])
		if err != nil || pid == os.Getpid() {
			return pid != os.Getpid()
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}, nil)
}

// sweep removes the containers, then networks, then images that carry the
// label filter and that match. Images named in extra are removed too.
func sweep(client *dc.Client, filter string, match func(map[string]string) bool, extra []string) error {
	var errs []error
	cs, err := client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"label": {filter}}})
	if err != nil {
		errs = append(errs, fmt.Errorf("cannot list containers: %w", err))
	}
	for _, c := range cs {
		if !match(c.Labels) {
			continue
		}
		if err := client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true}); err != nil {
			var nf *dc.NoSuchContainer
			if !errors.As(err, &nf) {
				errs = append(errs, fmt.Errorf("cannot remove container %s: %w", c.ID, err))
			}
		}
	}
	ns, err := client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {filter: true}})
	if err != nil {
		errs = append(errs, fmt.Errorf("cannot list networks: %w", err))
	}
	for _, n := range ns {
		if !match(n.Labels) {
			continue
		}
		if err := client.RemoveNetwork(n.ID); err != nil {
			var nf *dc.NoSuchNetwork
			if !errors.As(err, &nf) {
				errs = append(errs, fmt.Errorf("cannot remove network %s: %w", n.Name, err))
			}
		}
	}
	images := map[string]bool{}
	is, err := client.ListImages(dc.ListImagesOptions{All: true, Filters: map[string][]string{"label": {filter}}})
	if err != nil {
		errs = append(errs, fmt.Errorf("cannot list images: %w", err))
	}
	for _, im := range is {
		if match(im.Labels) {
			images[im.ID] = true
		}
	}
	for _, name := range extra {
		if im, err := client.InspectImage(name); err == nil {
			images[im.ID] = true
		}
	}
	for id := range images {
		if err := client.RemoveImageExtended(id, dc.RemoveImageOptions{Force: true}); err != nil && !errors.Is(err, dc.ErrNoSuchImage) {
			errs = append(errs, fmt.Errorf("cannot remove image %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// leftovers lists what of the run is still there: containers, networks,
// images (by label).
func leftovers(client *dc.Client, run string) ([]string, error) {
	filter := labelRun + "=" + run
	var left []string
	cs, err := client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"label": {filter}}})
	if err != nil {
		return nil, fmt.Errorf("cannot list containers: %w", err)
	}
	for _, c := range cs {
		left = append(left, "container "+c.ID[:12]+" "+fmt.Sprint(c.Names))
	}
	ns, err := client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {filter: true}})
	if err != nil {
		return nil, fmt.Errorf("cannot list networks: %w", err)
	}
	for _, n := range ns {
		left = append(left, "network "+n.Name)
	}
	is, err := client.ListImages(dc.ListImagesOptions{All: true, Filters: map[string][]string{"label": {filter}}})
	if err != nil {
		return nil, fmt.Errorf("cannot list images: %w", err)
	}
	for _, im := range is {
		left = append(left, "image "+im.ID+" "+fmt.Sprint(im.RepoTags))
	}
	return left, nil
}

// staticBinary builds a Go package of dir (module root or tool module) as a
// static Linux binary into out.
func staticBinary(ctx context.Context, dir, pkg, out string, extraEnv ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux"), extraEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cannot build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// ferretBinary builds the FerretDB test server (tools/ferretdb) static, once
// per content of that directory, into the user cache.
func ferretBinary(ctx context.Context, root string) (string, error) {
	tool := filepath.Join(root, "tools", "ferretdb")
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(tool, f))
		if err != nil {
			return "", fmt.Errorf("cannot read tools/ferretdb: %w", err)
		}
		h.Write(b)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sink-test", "faults")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create %s: %w", dir, err)
	}
	bin := filepath.Join(dir, "ferretdb-static-"+hex.EncodeToString(h.Sum(nil))[:12])
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin, nil
	}
	tmp := bin + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := staticBinary(ctx, tool, ".", tmp, "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false"); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("cannot store the FerretDB binary: %w", err)
	}
	return bin, nil
}
