package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/internal/testkit/testcerts"
)

// SecurityConfig.Opts must produce options that really authenticate: a
// client built with them talks to a TLS + SASL broker (kfake) with every
// mechanism, and a wrong password is refused. NewClient applies
// ClientConfig.Security.
func TestSecurityOptsAgainstATLSAndSASLBroker(t *testing.T) {
	ca := testcerts.NewCA(t, "kafka-ca")
	srv := ca.Server(t, "broker")
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser(SASLPlain, "plain-user", "plain-pass"),
		kfake.Superuser(SASLScramSHA256, "scram256-user", "scram256-pass"),
		kfake.Superuser(SASLScramSHA512, "scram512-user", "scram512-pass"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	pingWith := func(cl *kgo.Client) error {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	ping := func(sec SecurityConfig) error {
		opts, err := sec.Opts()
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RetryTimeout(2*time.Second))...)
		if err != nil {
			return err
		}
		return pingWith(cl)
	}
	for _, c := range []struct{ mech, user, pass string }{
		{SASLPlain, "plain-user", "plain-pass"},
		{SASLScramSHA256, "scram256-user", "scram256-pass"},
		{SASLScramSHA512, "scram512-user", "scram512-pass"},
	} {
		sec := SecurityConfig{TLS: true, CAFile: ca.CertFile, SASLMechanism: c.mech, Username: c.user, Password: c.pass}
		if err := sec.Validate(); err != nil {
			t.Fatalf("%s: %v", c.mech, err)
		}
		if err := ping(sec); err != nil {
			t.Errorf("%s: %v", c.mech, err)
		}
		sec.Password = "wrong"
		if err := ping(sec); err == nil {
			t.Errorf("%s: a wrong password was accepted", c.mech)
		}
	}
	// The mechanism is case-insensitive.
	if err := ping(SecurityConfig{TLS: true, CAFile: ca.CertFile, SASLMechanism: "scram-sha-512", Username: "scram512-user", Password: "scram512-pass"}); err != nil {
		t.Errorf("lower-case mechanism: %v", err)
	}
	// Without the CA the broker's certificate is not trusted.
	if err := ping(SecurityConfig{TLS: true, SASLMechanism: SASLPlain, Username: "plain-user", Password: "plain-pass"}); err == nil {
		t.Error("an untrusted broker certificate was accepted")
	}
	if opts, err := (SecurityConfig{}).Opts(); err != nil || len(opts) != 0 {
		t.Errorf("no security settings: %d options, %v", len(opts), err)
	}

	// NewClient uses ClientConfig.Security.
	cc := ClientConfig{Brokers: cluster.ListenAddrs(), Security: SecurityConfig{TLS: true, CAFile: ca.CertFile, SASLMechanism: SASLPlain, Username: "plain-user", Password: "plain-pass"}}
	cl, err := NewClient(cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := pingWith(cl); err != nil {
		t.Errorf("NewClient with Security: %v", err)
	}
	cc.Security.CAFile = "/nonexistent/ca.pem"
	if _, err := NewClient(cc); err == nil || !strings.Contains(err.Error(), `CAFile: cannot read "/nonexistent/ca.pem"`) {
		t.Errorf("NewClient with a missing CA file: %v", err)
	}
}

func TestSecurityConfigReportsEveryProblem(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	for _, c := range []struct {
		cfg  SecurityConfig
		want []string
	}{
		{SecurityConfig{CAFile: ca.CertFile, KeyFile: a.KeyFile, SASLMechanism: SASLScramSHA256, Username: "sink"}, []string{
			"CAFile is set but TLS is not true",
			"KeyFile is set but TLS is not true",
			"SASLMechanism=SCRAM-SHA-256 needs Password",
		}},
		{SecurityConfig{TLS: true, CAFile: "/nonexistent/ca.pem", CertFile: a.CertFile, SASLMechanism: "GSSAPI", Password: "hunter2-very-secret"}, []string{
			`CAFile: cannot read "/nonexistent/ca.pem": no such file or directory`,
			"CertFile is set but KeyFile is not",
			`SASLMechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "GSSAPI"`,
		}},
		{SecurityConfig{TLS: true, CertFile: a.CertFile, KeyFile: b.KeyFile, Username: "sink", Password: "hunter2-very-secret"}, []string{
			"CertFile and KeyFile: cannot load the certificate and key",
			"Username or Password is set but SASLMechanism is not",
		}},
		{SecurityConfig{TLS: true, KeyFile: a.KeyFile, SASLMechanism: SASLPlain, Password: "hunter2-very-secret",
			Names: SecurityNames{TLS: "SINK_KAFKA_TLS_ENABLED", KeyFile: "SINK_KAFKA_TLS_KEY_FILE", CertFile: "SINK_KAFKA_TLS_CERT_FILE", SASLMechanism: "SINK_KAFKA_SASL_MECHANISM", Username: "SINK_KAFKA_SASL_USERNAME"}}, []string{
			"SINK_KAFKA_TLS_KEY_FILE is set but SINK_KAFKA_TLS_CERT_FILE is not",
			"SINK_KAFKA_SASL_MECHANISM=PLAIN needs SINK_KAFKA_SASL_USERNAME",
		}},
	} {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("%v accepted", c.cfg)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("missing problem %q in:\n%v", want, err)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error reveals the password:\n%v", err)
		}
	}
	valid := SecurityConfig{TLS: true, CAFile: ca.CertFile, CertFile: a.CertFile, KeyFile: a.KeyFile, SASLMechanism: SASLScramSHA512, Username: "sink", Password: "p"}
	if err := valid.Validate(); err != nil {
		t.Errorf("valid settings: %v", err)
	}
	if err := (SecurityConfig{}).Validate(); err != nil {
		t.Errorf("no security: %v", err)
	}
}

func TestSecurityConfigHidesThePassword(t *testing.T) {
	sec := SecurityConfig{TLS: true, SASLMechanism: SASLPlain, Username: "sink", Password: "hunter2-very-secret"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("kafka", "security", sec, "client", ClientConfig{Security: sec})
	j, err := json.Marshal(ClientConfig{Brokers: []string{"b:9092"}, Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", sec), "%+v": fmt.Sprintf("%+v", sec), "%#v": fmt.Sprintf("%#v", sec), "%s": sec.String(),
		"client %+v": fmt.Sprintf("%+v", ClientConfig{Security: sec}), "slog": logs.String(), "json": string(j),
	} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%s shows the password: %s", name, s)
		}
		if name != "json" && !strings.Contains(s, "[redacted]") {
			t.Errorf("%s does not show [redacted]: %s", name, s)
		}
	}
}
