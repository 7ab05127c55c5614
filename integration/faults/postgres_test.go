package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/sink-io/sink/internal/testkit/pgtest"
)

// Databases the suite runs against (SINK_FAULTS_DB).
const (
	dbMongo    = "mongo"    // the MongoDB-wire server: mongo:7 when present, else the test FerretDB (default)
	dbPostgres = "postgres" // PostgreSQL 15 from the installed binaries, FROM scratch
)

// faultsDB returns the database of the run: SINK_FAULTS_DB or dbMongo.
func faultsDB() (string, error) {
	switch v := os.Getenv(envDB); v {
	case "", dbMongo, "mongodb", "ferretdb":
		return dbMongo, nil
	case dbPostgres, "postgresql", "pg":
		return dbPostgres, nil
	default:
		return "", fmt.Errorf("%s=%q: want %s or %s", envDB, v, dbMongo, dbPostgres)
	}
}

// pgDataDir is where the image holds the data directory that initdb wrote
// on the host. A db-kill trial restarts the same container, so the data
// (its writable layer) survives and the server goes through crash recovery.
const (
	pgDataDir  = "/var/lib/postgresql/data"
	pgDatabase = "sink"
)

// pgBinDir returns the directory of the installed PostgreSQL programs
// (`pg_config --bindir`, else Debian's layout).
func pgBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isRegular(filepath.Join(d, "postgres")) && isRegular(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	for i := len(matches) - 1; i >= 0; i-- {
		d := filepath.Dir(matches[i])
		if isRegular(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%s=%s: no PostgreSQL binaries (pg_config --bindir, /usr/lib/postgresql/*/bin): apt-get install postgresql", envDB, dbPostgres)
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// pgOSUser returns the uid and gid PostgreSQL runs as: the postgres system
// user (PostgreSQL refuses root), also inside the container.
func pgOSUser() (uid, gid int, err error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("no postgres system user to run PostgreSQL as: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, fmt.Errorf("the postgres system user is root")
	}
	return uid, gid, nil
}

// buildPostgresImage builds a FROM scratch image of the installed
// PostgreSQL: the postgres program at its installed path (it finds its
// share and lib directories relative to it), the libraries ldd names and the
// dynamic loader, the server's lib directory (plpgsql, encoding
// conversions), its share directory, the UTC zone, an /etc/passwd naming the
// postgres user, and a data directory initdb wrote on the host with the
// superuser pgtest.User and the password pgtest.Password. It runs as the
// postgres uid, listening on 5432 on every interface.
func (e *engine) buildPostgresImage(ctx context.Context) (image, version string, err error) {
	bin, err := pgBinDir()
	if err != nil {
		return "", "", err
	}
	uid, gid, err := pgOSUser()
	if err != nil {
		return "", "", err
	}
	dir, err := os.MkdirTemp("", "sink-faults-pgimage-")
	if err != nil {
		return "", "", fmt.Errorf("cannot create the image context: %w", err)
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	postgres := filepath.Join(bin, "postgres")
	files := []string{postgres}
	libs, err := lddPaths(ctx, postgres)
	if err != nil {
		return "", "", err
	}
	files = append(files, libs...)
	for _, f := range files {
		if err := copyInto(root, f, 0o755); err != nil {
			return "", "", err
		}
	}
	// The server's lib and share directories, next to bin as installed.
	for _, d := range []string{filepath.Join(filepath.Dir(bin), "lib"), pgShareDir(bin)} {
		if err := copyTree(d, filepath.Join(root, d), func(rel string, de fs.DirEntry) bool {
			return rel != "bitcode" // JIT bitcode: jit is off
		}); err != nil {
			return "", "", err
		}
	}
	for _, z := range []string{"/usr/share/zoneinfo/Etc/UTC", "/usr/share/zoneinfo/UTC"} {
		if err := copyInto(root, z, 0o644); err != nil {
			return "", "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return "", "", err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/:/nonexistent\npostgres:x:%d:%d:PostgreSQL:/var/lib/postgresql:/nonexistent\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\npostgres:x:%d:\n", gid)
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "group"), []byte(group), 0o644); err != nil {
		return "", "", err
	}
	for _, d := range []string{"tmp", "var/run/postgresql"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o777); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(root, d, ".keep"), nil, 0o644); err != nil {
			return "", "", err
		}
	}
	if version, err = initPostgresData(ctx, bin, dir, uid, gid); err != nil {
		return "", "", err
	}
	// COPY creates its destination directory 0755, and PostgreSQL wants
	// its data directory 0700: the parent is copied, so that the data
	// directory keeps the mode initdb gave it.
	df := fmt.Sprintf("FROM scratch\nCOPY rootfs/ /\nCOPY --chown=%d:%d pgparent %s\nUSER %d:%d\nENTRYPOINT [%q, \"-D\", %q]\n",
		uid, gid, filepath.Dir(pgDataDir), uid, gid, postgres, pgDataDir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", "", fmt.Errorf("cannot write the Dockerfile: %w", err)
	}
	image = "sink-faults-postgres:" + e.run
	var out bytes.Buffer
	err = e.create(func() error {
		e.built = append(e.built, image)
		return e.dc.BuildImage(dc.BuildImageOptions{
			Name: image, ContextDir: dir, Labels: e.labels(), OutputStream: &out,
			RmTmpContainer: true, ForceRmTmpContainer: true, SuppressOutput: true,
		})
	})
	if err != nil {
		return "", "", fmt.Errorf("cannot build image %s: %w\n%s", image, err, out.String())
	}
	return image, version, nil
}

// pgShareDir is the installed share directory (`pg_config --sharedir`, else
// Debian's /usr/share/postgresql/<major>).
func pgShareDir(bin string) string {
	if out, err := exec.Command("pg_config", "--sharedir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" {
			return d
		}
	}
	return filepath.Join("/usr/share/postgresql", filepath.Base(filepath.Dir(bin)))
}

// initPostgresData runs initdb as the postgres user into dir/pgparent/data (the
// superuser pgtest.User with pgtest.Password, scram-sha-256), lets every
// host of the Docker networks connect with that password, and returns the
// server's version.
func initPostgresData(ctx context.Context, bin, dir string, uid, gid int) (string, error) {
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", fmt.Errorf("cannot hand %s to the postgres user: %w", dir, err)
	}
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(pgtest.Password+"\n"), 0o600); err != nil {
		return "", err
	}
	defer os.Remove(pwfile)
	if err := os.Chown(pwfile, uid, gid); err != nil {
		return "", err
	}
	data := filepath.Join(dir, "pgparent", filepath.Base(pgDataDir))
	if err := os.Mkdir(filepath.Join(dir, "pgparent"), 0o755); err != nil {
		return "", err
	}
	if err := os.Chown(filepath.Join(dir, "pgparent"), uid, gid); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", pgtest.User, "--pwfile", pwfile,
		"-A", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C", "TZ=UTC")
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, lastLines(string(out), 10))
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = hba.WriteString("host all all 0.0.0.0/0 scram-sha-256\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("cannot extend pg_hba.conf: %w", err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// lddPaths returns the libraries a program links and its dynamic loader,
// as ldd names them.
func lddPaths(ctx context.Context, program string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	paths := parseLdd(out)
	if len(paths) == 0 {
		return nil, fmt.Errorf("ldd %s named no libraries:\n%s", program, out)
	}
	return paths, nil
}

// parseLdd returns the absolute paths of ldd's output: the libraries
// ("name => /path (0x…)") and the dynamic loader ("/path (0x…)"); the vDSO
// has no file.
func parseLdd(out []byte) []string {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths
}

// copyTree copies the regular files under src (following symbolic links to
// files) to dst, skipping the top-level entries keep rejects.
func copyTree(src, dst string, keep func(rel string, de fs.DirEntry) bool) error {
	return filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel != "." && !keep(rel, de) {
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil // a dangling link or a special file
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return copyFile(p, target, st.Mode().Perm())
	})
}

// copyInto copies the file at the absolute path p (following links) to the
// same path under root.
func copyInto(root, p string, mode os.FileMode) error {
	target := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %w", filepath.Dir(target), err)
	}
	return copyFile(p, target, mode)
}

// pgAdminURL is the superuser's URL of database db through the published
// loopback port (for the test process).
func pgAdminURL(port int, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(pgtest.User, pgtest.Password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/" + db,
		RawQuery: "sslmode=disable&connect_timeout=3&application_name=sink-faults"}
	return u.String()
}

// pgSinkURL is the URL the Sink containers use: the host db on the data
// network, the password percent-encoded.
func pgSinkURL() string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(pgtest.User, pgtest.Password),
		Host: "db:5432", Path: "/" + pgDatabase, RawQuery: "sslmode=disable&connect_timeout=3"}
	return u.String()
}

// pgArgs are the server's settings: every interface, no Unix socket, UTC
// without the zone database, no JIT; fsync stays on (db-kill trials test
// crash recovery).
var pgArgs = []string{"-c", "listen_addresses=*", "-p", "5432", "-c", "unix_socket_directories=",
	"-c", "timezone=UTC", "-c", "log_timezone=UTC", "-c", "jit=off", "-c", "max_connections=100",
	"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"}

// startPostgres starts the PostgreSQL image as the db container, its port
// published on loopback, waits until it answers and creates the database
// Sink uses.
func startPostgres(ctx context.Context, e *engine, image, network string) (*container, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	db, err := e.start(containerSpec{
		role: "db", image: image, cmd: pgArgs,
		networks: map[string][]string{network: {"db"}},
		publish:  map[string]int{"5432/tcp": port},
	})
	if err != nil {
		return nil, 0, err
	}
	if err := awaitPostgres(ctx, db, port, 60*time.Second); err != nil {
		return nil, 0, err
	}
	conn, err := pgx.Connect(ctx, pgAdminURL(port, "postgres"))
	if err != nil {
		return nil, 0, fmt.Errorf("cannot connect to PostgreSQL: %s", pgScrub(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{pgDatabase}.Sanitize()); err != nil {
		return nil, 0, fmt.Errorf("cannot create database %s: %s", pgDatabase, pgScrub(err))
	}
	return db, port, nil
}

// awaitPostgres waits until the server accepts connections (after a start
// or a crash recovery).
func awaitPostgres(ctx context.Context, db *container, port int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := pgx.Connect(cctx, pgAdminURL(port, "postgres"))
		if err == nil {
			err = conn.Ping(cctx)
			_ = conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("PostgreSQL does not answer after %s (%s); its log:\n%s", limit, pgScrub(err), lastLines(db.logs(40), 40))
		}
		time.Sleep(100 * time.Millisecond) // polling: the server announces readiness nowhere we can await
	}
}

// backendKiller terminates backends of the Sink processes
// (application_name sink) over one admin connection and counts them by the
// state pg_stat_activity gave them as they were terminated.
type backendKiller struct {
	conn  *pgx.Conn
	ended map[string]int // by state: active, idle in transaction, idle
	// inFlight counts the terminated backends that were running a
	// statement or inside a transaction (xact_start set).
	inFlight int
}

func newBackendKiller(ctx context.Context, port int) (*backendKiller, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, pgAdminURL(port, "postgres"))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL: %s", pgScrub(err))
	}
	return &backendKiller{conn: conn, ended: map[string]int{}}, nil
}

func (k *backendKiller) close() { _ = k.conn.Close(context.Background()) }

// terminate ends the Sink backends, all of them, or (inFlightOnly) those
// running a statement or inside a transaction, and returns how many.
func (k *backendKiller) terminate(ctx context.Context, inFlightOnly bool) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q := `SELECT coalesce(state, '?'), xact_start IS NOT NULL OR state = 'active', pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'sink' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`
	if inFlightOnly {
		q += ` AND (state = 'active' OR xact_start IS NOT NULL)`
	}
	rows, err := k.conn.Query(cctx, q)
	if err != nil {
		return 0, fmt.Errorf("pg_terminate_backend: %s", pgScrub(err))
	}
	var state string
	var busy, ended bool
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&state, &busy, &ended}, func() error {
		if ended {
			n++
			k.ended[state]++
			if busy {
				k.inFlight++
			}
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("pg_terminate_backend: %s", pgScrub(err))
	}
	return n, nil
}

// pgScrub is an error's text without any part of the test password.
func pgScrub(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	for _, f := range append([]string{pgtest.Password, url.QueryEscape(pgtest.Password), url.PathEscape(pgtest.Password)}, pgtest.Fragments...) {
		s = strings.ReplaceAll(s, f, "***")
	}
	return s
}

// passwordLeaks returns the containers whose logs show a part of the
// PostgreSQL password.
func passwordLeaks(cs []*container) []string {
	var out []string
	for _, c := range cs {
		logs := c.logs(1000000)
		for _, f := range pgtest.Fragments {
			if strings.Contains(logs, f) {
				out = append(out, c.role)
				break
			}
		}
	}
	return out
}
