package faults

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sink-io/sink/internal/testkit"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string                    `yaml:"image"`
	Build       any                       `yaml:"build"`
	Command     []string                  `yaml:"command"`
	Environment map[string]string         `yaml:"environment"`
	DependsOn   map[string]map[string]any `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Ports           []string `yaml:"ports"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
}

// deploy/compose.yaml: MongoDB as a replica set, Kafka in KRaft mode, the
// topics created at start, Sink server and worker wired to them with known
// settings, health checks and start order. It cannot be started here (no
// image can be pulled): this checks its structure and, where a Compose CLI
// exists, that Compose accepts it.
func TestComposeFile(t *testing.T) {
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "deploy", "compose.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	svc := func(name string) composeService {
		t.Helper()
		s, ok := cf.Services[name]
		if !ok {
			t.Fatalf("no service %q", name)
		}
		return s
	}
	mongo, kafka, topics := svc("mongodb"), svc("kafka"), svc("kafka-topics")
	server, worker := svc("sink-server"), svc("sink-worker")

	// MongoDB: a replica set that its health check initiates.
	if i := slices.Index(mongo.Command, "--replSet"); i < 0 || i+1 >= len(mongo.Command) || mongo.Command[i+1] != "rs0" {
		t.Errorf("mongodb command %q: want --replSet rs0", mongo.Command)
	}
	if mongo.Healthcheck == nil || !strings.Contains(strings.Join(mongo.Healthcheck.Test, " "), "rs.initiate") {
		t.Error("mongodb needs a health check that initiates the replica set")
	}
	// Kafka: KRaft (broker and controller in one node), no ZooKeeper.
	if roles := kafka.Environment["KAFKA_PROCESS_ROLES"]; !strings.Contains(roles, "broker") || !strings.Contains(roles, "controller") {
		t.Errorf("kafka KAFKA_PROCESS_ROLES=%q: want broker,controller (KRaft)", roles)
	}
	if bytes.Contains(bytes.ToLower(b), []byte("zookeeper")) {
		t.Error("the compose file mentions ZooKeeper; Kafka runs in KRaft mode")
	}
	if kafka.Healthcheck == nil || len(kafka.Healthcheck.Test) == 0 {
		t.Error("kafka needs a health check")
	}
	advertised := kafka.Environment["KAFKA_ADVERTISED_LISTENERS"]

	// Sink: known settings only, the same storage and log for both roles.
	known := map[string]bool{}
	cfgFiles, err := filepath.Glob(filepath.Join(root, "bootstrap", "envconfig", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range cfgFiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`env:"(SINK_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
			known[m[1]] = true
		}
	}
	if len(known) < 20 {
		t.Fatalf("found only %d settings in bootstrap/envconfig: %v", len(known), known)
	}
	for name, s := range map[string]composeService{"sink-server": server, "sink-worker": worker} {
		for k := range s.Environment {
			if !known[k] {
				t.Errorf("%s sets %s, which is not a Sink setting (bootstrap/envconfig)", name, k)
			}
		}
		if s.Build == nil {
			t.Errorf("%s: no build section (the Sink image is built from the repository's Dockerfile)", name)
		}
		uri := s.Environment["SINK_MONGODB_URI"]
		if !strings.HasPrefix(uri, "mongodb://mongodb:27017") || !strings.Contains(uri, "replicaSet=rs0") {
			t.Errorf("%s SINK_MONGODB_URI=%q: want the mongodb service and replicaSet=rs0", name, uri)
		}
		if br := s.Environment["SINK_KAFKA_BROKERS"]; br == "" || !strings.Contains(advertised, "//"+br) {
			t.Errorf("%s SINK_KAFKA_BROKERS=%q is not what kafka advertises (%q)", name, br, advertised)
		}
		if s.DependsOn["mongodb"]["condition"] != "service_healthy" || s.DependsOn["kafka-topics"]["condition"] != "service_completed_successfully" {
			t.Errorf("%s must start after a healthy mongodb and the created topics: depends_on %v", name, s.DependsOn)
		}
		if d, err := time.ParseDuration(s.StopGracePeriod); err != nil || d <= 30*time.Second {
			t.Errorf("%s stop_grace_period %q: want more than SINK_SHUTDOWN_TIMEOUT's default 30s", name, s.StopGracePeriod)
		}
	}
	if server.Environment["SINK_MODE"] != "server" || worker.Environment["SINK_MODE"] != "worker" {
		t.Errorf("SINK_MODE: server %q, worker %q", server.Environment["SINK_MODE"], worker.Environment["SINK_MODE"])
	}
	if worker.Environment["SINK_KAFKA_GROUP_ID"] == "" {
		t.Error("the worker needs SINK_KAFKA_GROUP_ID")
	}
	for _, k := range []string{"SINK_MONGODB_URI", "SINK_KAFKA_BROKERS", "SINK_KAFKA_TOPIC"} {
		if server.Environment[k] != worker.Environment[k] {
			t.Errorf("%s differs between server (%q) and worker (%q)", k, server.Environment[k], worker.Environment[k])
		}
	}
	// Both roles' health checks run `sink health` (the image has no shell
	// and no HTTP client), against the role's own /readyz.
	for name, s := range map[string]composeService{"sink-server": server, "sink-worker": worker} {
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 3 || s.Healthcheck.Test[0] != "CMD" ||
			!strings.HasSuffix(s.Healthcheck.Test[1], "/sink") || s.Healthcheck.Test[2] != "health" ||
			!strings.Contains(strings.Join(s.Healthcheck.Test, " "), "localhost:8081/readyz") {
			t.Errorf("%s health check %+v: want [CMD .../sink health --url http://localhost:8081/readyz]", name, s.Healthcheck)
		}
	}
	if !slices.ContainsFunc(server.Ports, func(p string) bool { return strings.HasSuffix(p, ":8080") }) {
		t.Errorf("sink-server ports %q: want the gRPC API on 8080", server.Ports)
	}

	// The topics job creates the mutation topic and its dead-letter topic.
	script := strings.Join(topics.Command, " ")
	topic := server.Environment["SINK_KAFKA_TOPIC"]
	dlt := server.Environment["SINK_KAFKA_DEAD_LETTER_TOPIC"]
	if dlt == "" {
		dlt = topic + ".dead-letter"
	}
	for _, want := range []string{"--topic " + topic + " ", "--topic " + dlt + " "} {
		if topic == "" || !strings.Contains(script+" ", want) {
			t.Errorf("kafka-topics does not create %q: %s", strings.TrimSpace(want), script)
		}
	}
	if topics.DependsOn["kafka"]["condition"] != "service_healthy" {
		t.Errorf("kafka-topics must wait for a healthy kafka: %v", topics.DependsOn)
	}

	// Compose itself accepts the file, where a Compose CLI is installed.
	checked := false
	for _, cli := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		if _, err := exec.LookPath(cli[0]); err != nil {
			continue
		}
		if err := exec.Command(cli[0], append(cli[1:], "version")...).Run(); err != nil {
			continue
		}
		cmd := exec.Command(cli[0], append(cli[1:], "-f", path, "config", "-q")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s config: %v\n%s", strings.Join(cli, " "), err, out)
		}
		t.Logf("%s config accepts deploy/compose.yaml", strings.Join(cli, " "))
		checked = true
		break
	}
	if !checked {
		t.Log("no Compose CLI here: checked the structure only")
	}
}
