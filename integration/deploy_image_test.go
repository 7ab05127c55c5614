package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// finalStage returns the instructions of the Dockerfile's last stage
// (after its last FROM), without comments and blank lines.
func finalStage(t *testing.T, dockerfile string) (from string, lines []string) {
	t.Helper()
	for _, l := range strings.Split(dockerfile, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			from, lines = l, nil
			continue
		}
		lines = append(lines, l)
	}
	return from, lines
}

// The Dockerfile's final stage: non-root numeric user, the ports, the role
// switch, an exec-form entrypoint.
func TestDockerfileFinalStage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	from, lines := finalStage(t, string(b))
	if !strings.Contains(from, "distroless/static") || !strings.Contains(from, ":nonroot") {
		t.Errorf("final base %q: want a distroless static nonroot image", from)
	}
	stage := strings.Join(lines, "\n")
	if m := regexp.MustCompile(`(?m)^USER (\d+)(:(\d+))?$`).FindStringSubmatch(stage); m == nil || m[1] == "0" || m[3] == "0" {
		t.Errorf("the final stage needs a numeric non-root USER:\n%s", stage)
	}
	for _, want := range []string{"EXPOSE 8080 8081", "SINK_MODE=server", `ENTRYPOINT ["/usr/local/bin/sink"]`, "COPY --from=build /out/sink /usr/local/bin/sink"} {
		if !strings.Contains(stage, want) {
			t.Errorf("the final stage lacks %q:\n%s", want, stage)
		}
	}
	if !regexp.MustCompile(`(?s)CGO_ENABLED=0.{0,200}go build`).Match(b) {
		t.Error("the binary must be built static (CGO_ENABLED=0) for the distroless static base")
	}
}

func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// The image, as far as it can be built here: no base image can be pulled,
// so this builds the Dockerfile's final stage on FROM scratch from a locally
// built static binary (the same instructions, the CA bundle where distroless
// has it), runs it and calls it over gRPC.
func TestContainerImageServesAsNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a container image")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker client")
	}
	if out, err := docker(t, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine: %s", out)
	}
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	_, lines := finalStage(t, string(b))
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(ctxDir, "sink"), "./cmd/sink")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	df := []string{"FROM scratch"}
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if err := os.WriteFile(filepath.Join(ctxDir, "ca-certificates.crt"), ca, 0o644); err != nil {
			t.Fatal(err)
		}
		df = append(df, "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt")
	}
	for _, l := range lines {
		df = append(df, strings.Replace(l, "COPY --from=build /out/sink ", "COPY sink ", 1))
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(strings.Join(df, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("sink-image-test:%d", time.Now().UnixNano())
	if out, err := docker(t, "build", "-q", "-t", image, ctxDir); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = docker(t, "rmi", "-f", image) })

	if user, _ := docker(t, "image", "inspect", "--format", "{{.Config.User}}", image); user != "65532:65532" {
		t.Errorf("image user %q", user)
	}
	if ports, _ := docker(t, "image", "inspect", "--format", "{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}", image); ports != "8080/tcp 8081/tcp" {
		t.Errorf("exposed ports %q", ports)
	}

	// SINK_MODE selects the role: a worker without Kafka refuses to start.
	out, err := docker(t, "run", "--rm", "-e", "SINK_MODE=worker", image)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "SINK_MODE=worker needs") {
		t.Errorf("worker without Kafka: %v\n%s", err, out)
	}

	cid, err := docker(t, "run", "-d", "-p", "127.0.0.1::8080", image)
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, cid)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker(t, "logs", cid)
			t.Logf("container logs:\n%s", logs)
		}
		_, _ = docker(t, "rm", "-f", cid)
	})
	hostPort, err := docker(t, "port", cid, "8080/tcp")
	if err != nil {
		t.Fatalf("docker port: %v %s", err, hostPort)
	}
	hostPort = strings.Split(hostPort, "\n")[0]
	conn, err := grpc.NewClient(hostPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Await readiness: the health service answers SERVING (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hr, err := healthpb.NewHealthClient(conn).Check(c, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && hr.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not become ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	client := sinkv1.NewSinkClient(conn)
	expectApplied(t, "put into the container", write(t, client, putOp(addr("shop", "orders", "o-1"), `{"total":10}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))[0])
	if got := readJSON(t, client, addr("shop", "orders", "o-1")); got != `{"total":10}` {
		t.Fatalf("read from the container: %q", got)
	}
	// The process runs as the numeric non-root user.
	top, err := docker(t, "top", cid, "-o", "pid,uid")
	if err != nil {
		t.Fatalf("docker top: %v %s", err, top)
	}
	rows := strings.Split(top, "\n")
	if len(rows) < 2 || strings.Fields(rows[0])[1] != "UID" {
		t.Fatalf("docker top: %q", top)
	}
	for _, row := range rows[1:] {
		f := strings.Fields(row)
		if n, err := strconv.Atoi(f[len(f)-1]); err != nil || n != 65532 {
			t.Fatalf("a container process runs as %q, want uid 65532", row)
		}
	}
}
