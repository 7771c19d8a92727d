package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/childproc"
	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/unittier"
)

// binaries are the real hoard and plugin builds every test of the package
// shares (built once, in TestMain).
type binaries struct {
	hoard, plugin string
}

// buildBinaries builds ./cmd/hoard and ./cmd/hoard-bittorrent into dir,
// exactly as an operator would, without the race detector: these are the
// processes under test, not the test.
func buildBinaries(dir string) (binaries, error) {
	b := binaries{hoard: filepath.Join(dir, "hoard"), plugin: filepath.Join(dir, "hoard-bittorrent")}
	for out, pkg := range map[string]string{b.hoard: "../../cmd/hoard", b.plugin: "../../cmd/hoard-bittorrent"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return b, fmt.Errorf("go build %s: %w", pkg, err)
		}
	}
	return b, nil
}

// process is one child we start, kill and restart with the same command
// line, its output appended to one log file across restarts.
type process struct {
	name    string
	argv    []string
	env     []string
	logPath string

	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *process) start() error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so a Ctrl-C of the test run doesn't kill it
	// behind the suite's back; the suite kills it itself, and the kernel
	// does if the test binary dies first (a timeout), so nothing outlives
	// the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := childproc.Start(cmd, syscall.SIGKILL); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	logFile.Close() // the child has its own copy
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(cmd, p.exited)
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() error {
	if p.cmd == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still alive 10 s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// logTail is the end of the process's log, for failure messages.
func (p *process) logTail() string {
	content, _ := os.ReadFile(p.logPath)
	if len(content) > 4000 {
		content = content[len(content)-4000:]
	}
	return string(content)
}

// redisServer is a redis-server with the AOF on and appendfsync everysec,
// as hoard's supervised one runs, on a fixed loopback port and data dir so
// that a restart after SIGKILL reads back what the AOF kept.
type redisServer struct {
	process
	addr string
}

// newRedisServer prepares (does not start) a redis-server in dir/name;
// extra is appended to its command line.
func newRedisServer(dir, name string, extra ...string) (*redisServer, error) {
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freeport.Get(freeport.TCP)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	argv := []string{binary, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dataDir,
		"--daemonize", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--notify-keyspace-events", "Ex"}
	return &redisServer{
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		process: process{
			name:    name,
			argv:    append(argv, extra...),
			env:     os.Environ(),
			logPath: filepath.Join(dir, name+".log"),
		},
	}, nil
}

// startAndWait starts redis-server and waits until it answers PING (after
// loading its AOF).
func (r *redisServer) startAndWait(ctx context.Context) error {
	if err := r.start(); err != nil {
		return err
	}
	client := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := client.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-r.exited:
			return fmt.Errorf("%s exited at start:\n%s", r.name, r.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not answering PING 30 s after start:\n%s", r.name, r.logTail())
}

// deployment is the Redis hoard runs on: one redis-server, a 3-master
// Redis Cluster, or the redis-server frontend 0 supervises itself.
type deployment struct {
	nodes   []*redisServer
	cluster bool
	// supervisedDir, when set, is the data dir of the redis-server that
	// frontend 0 runs as hoard serve does without HOARD_REDIS_URL (the
	// other frontends use its socket). The suite does not start it: a
	// Redis kill is of the pid in its pidfile, and hoard restarts it.
	supervisedDir string
}

// supervisedSocket is the supervised redis-server's unix socket.
func (d *deployment) supervisedSocket() string {
	return filepath.Join(d.supervisedDir, "redis.sock")
}

// url is HOARD_REDIS_URL for it: one URL, or the cluster's node list.
func (d *deployment) url() string {
	if d.supervisedDir != "" {
		return "unix://" + d.supervisedSocket()
	}
	if !d.cluster {
		return "redis://" + d.nodes[0].addr
	}
	addrs := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		addrs[i] = n.addr
	}
	return strings.Join(addrs, ",")
}

// client reads the deployment directly, for the checker.
func (d *deployment) client() redis.UniversalClient {
	if d.supervisedDir != "" {
		return redis.NewClient(&redis.Options{Network: "unix", Addr: d.supervisedSocket()})
	}
	if !d.cluster {
		return redis.NewClient(&redis.Options{Addr: d.nodes[0].addr})
	}
	addrs := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		addrs[i] = n.addr
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
}

func (d *deployment) stop() {
	for _, n := range d.nodes {
		_ = n.kill()
	}
	if d.supervisedDir != "" {
		// Frontend 0 was SIGKILLed, so its redis-server outlived it (and
		// would stop itself only after the orphan grace): end it now.
		if pid := d.supervisedPID(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// nodeClient is a client of node i alone (for a stall).
func (d *deployment) nodeClient(i int, readTimeout time.Duration) *redis.Client {
	if d.supervisedDir != "" {
		return redis.NewClient(&redis.Options{Network: "unix", Addr: d.supervisedSocket(), ReadTimeout: readTimeout})
	}
	return redis.NewClient(&redis.Options{Addr: d.nodes[i].addr, ReadTimeout: readTimeout})
}

// supervisedPID is the live supervised redis-server's pid, or 0.
func (d *deployment) supervisedPID() int {
	content, err := os.ReadFile(filepath.Join(d.supervisedDir, "redis.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(content)))
	if pid <= 0 || !processAlive(pid) {
		return 0
	}
	return pid
}

// killNode SIGKILLs node i's redis-server and waits until it is gone; it
// returns the pid killed.
func (d *deployment) killNode(i int) (int, error) {
	if d.supervisedDir == "" {
		return d.nodes[i].cmd.Process.Pid, d.nodes[i].kill()
	}
	pid := d.supervisedPID()
	if pid == 0 {
		return 0, fmt.Errorf("no live supervised redis-server in %s", d.supervisedDir)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill redis-server %d: %w", pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid); {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("redis-server %d still alive 10 s after SIGKILL", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid, nil
}

// restartNode brings node i back after killNode: the suite restarts its
// own redis-servers; hoard restarts the supervised one, which this waits
// for (a new pid answering PING after its replay).
func (d *deployment) restartNode(ctx context.Context, i, killed int) error {
	if d.supervisedDir == "" {
		return d.nodes[i].startAndWait(ctx)
	}
	client := redis.NewClient(&redis.Options{Network: "unix", Addr: d.supervisedSocket(), MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(recoveryTimeout)
	for time.Now().Before(deadline) {
		if pid := d.supervisedPID(); pid != 0 && pid != killed && client.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("hoard did not restart its redis-server within %s", recoveryTimeout)
}

const clusterSlots = 16384

// startDeployment starts one redis-server, or three cluster masters joined
// into one cluster with the slots split evenly (as internal/redistest
// does, but on fixed ports and data dirs that survive a SIGKILL).
func startDeployment(ctx context.Context, dir string, cluster, supervised bool) (*deployment, error) {
	d := &deployment{cluster: cluster}
	if supervised {
		// Started by frontend 0 (see newFrontend), in its data dir.
		d.supervisedDir = filepath.Join(dir, "frontend0", "redis")
		return d, nil
	}
	if !cluster {
		node, err := newRedisServer(dir, "redis")
		if err != nil {
			return nil, err
		}
		d.nodes = []*redisServer{node}
		return d, node.startAndWait(ctx)
	}
	busPorts := make([]int, 3)
	for i := range 3 {
		bus, err := freeport.Get(freeport.TCP)
		if err != nil {
			return nil, err
		}
		busPorts[i] = bus
		name := "redis-cluster" + strconv.Itoa(i)
		node, err := newRedisServer(dir, name, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, name, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus))
		if err != nil {
			return nil, err
		}
		d.nodes = append(d.nodes, node)
		if err := node.startAndWait(ctx); err != nil {
			return d, err
		}
	}
	clients := make([]*redis.Client, 3)
	for i, n := range d.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.addr})
		defer clients[i].Close()
		if err := clients[i].ClusterAddSlotsRange(ctx, i*clusterSlots/3, (i+1)*clusterSlots/3-1).Err(); err != nil {
			return d, fmt.Errorf("node %d: CLUSTER ADDSLOTSRANGE: %w", i, err)
		}
	}
	for i, n := range d.nodes[1:] {
		host, port, _ := net.SplitHostPort(n.addr)
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, strconv.Itoa(busPorts[i+1])).Err(); err != nil {
			return d, fmt.Errorf("CLUSTER MEET node %d: %w", i+1, err)
		}
	}
	return d, d.waitClusterOK(ctx)
}

// waitClusterOK waits until every node says cluster_state:ok and knows the
// other two (a restarted master rejoins from its nodes.conf).
func (d *deployment) waitClusterOK(ctx context.Context) error {
	if !d.cluster {
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		why = ""
		for i, n := range d.nodes {
			c := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil {
				why = fmt.Sprintf("node %d: %v", i, err)
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				why = fmt.Sprintf("node %d: not ok yet", i)
				break
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not ok 60 s after start: %s", why)
}

// nodeFor is the node holding key's slot (the cluster's slots are split
// evenly in node order).
func (d *deployment) nodeFor(ctx context.Context, key string) (int, error) {
	if !d.cluster {
		return 0, nil
	}
	c := redis.NewClient(&redis.Options{Addr: d.nodes[0].addr})
	defer c.Close()
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	for i := range 3 {
		if int(slot) <= (i+1)*clusterSlots/3-1 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("slot %d out of range", slot)
}

// frontend is one `hoard serve` on the shared Redis, optionally with the
// BitTorrent plugin as a separate binary on its own tracker port.
type frontend struct {
	process
	index   int
	base    string // http://127.0.0.1:port
	dataDir string
	tracker string // the plugin's HTTP tracker address, "" without the plugin
}

const adminToken = "chaos-admin-token"

// newFrontend prepares frontend index; redisURL "" runs it on a
// redis-server of its own (hoard's supervised one), and extra is added to
// its command line.
func newFrontend(dir string, index int, bins binaries, redisURL string, withPlugin bool, extra ...string) (*frontend, error) {
	port, err := freeport.Get(freeport.TCP)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "frontend"+strconv.Itoa(index))
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	argv := []string{bins.hoard, "serve", "--listen", listen, "--data-dir", dataDir,
		"--projects-file", filepath.Join(dir, "no-projects.json"), "--node", "chaos" + strconv.Itoa(index)}
	f := &frontend{index: index, base: "http://" + listen, dataDir: dataDir}
	if withPlugin {
		trackerPort, err := freeport.Get(freeport.TCP)
		if err != nil {
			return nil, err
		}
		f.tracker = net.JoinHostPort("127.0.0.1", strconv.Itoa(trackerPort))
		argv = append(argv, "--plugin", "bittorrent="+bins.plugin, "--plugin-settings",
			fmt.Sprintf(`bittorrent={"mode":"open","http":%q,"udp4":"","udp6":""}`, f.tracker))
	}
	env := append(os.Environ(), "HOARD_ADMIN_TOKEN="+adminToken)
	if redisURL != "" {
		env = append(env, "HOARD_REDIS_URL="+redisURL)
	}
	f.process = process{
		name:    "hoard serve #" + strconv.Itoa(index),
		argv:    append(argv, extra...),
		env:     env,
		logPath: filepath.Join(dir, "frontend"+strconv.Itoa(index)+".log"),
	}
	return f, nil
}

// startAndWait starts hoard serve and waits for /healthz, and for the
// plugin's tracker port when it has one.
func (f *frontend) startAndWait(ctx context.Context) error {
	if err := f.start(); err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if healthy(ctx, client, f.base+"/healthz") && (f.tracker == "" || announces(f.tracker)) {
			return nil
		}
		select {
		case <-f.exited:
			return fmt.Errorf("%s exited at start:\n%s", f.name, f.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not healthy 60 s after start:\n%s", f.name, f.logTail())
}

// pluginPID is the live plugin process named in the frontend's pid file,
// or 0.
func (f *frontend) pluginPID() int {
	content, err := os.ReadFile(filepath.Join(f.dataDir, "plugins", "bittorrent.pid"))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(content))
	if len(fields) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(fields[0])
	if pid <= 0 || !processAlive(pid) {
		return 0
	}
	return pid
}

func processAlive(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !strings.Contains(string(status), "State:\tZ")
}

func healthy(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// announces reports whether the BitTorrent tracker at addr answers an
// HTTP announce with a peer list (open mode takes any torrent), not only
// accepts a connection.
func announces(addr string) bool {
	query := "info_hash=" + url.QueryEscape("chaos-torrent-hash-1") + "&peer_id=" + url.QueryEscape("-CH0001-chaospeer001") +
		"&port=6881&uploaded=0&downloaded=0&left=100&compact=1"
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + addr + "/announce?" + query)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK &&
		strings.Contains(string(body), "8:interval") && !strings.Contains(string(body), "failure reason")
}

// requireTools skips (fails under CI=true) without redis-server, and
// skips off Linux, where /proc and parent-death signals are missing.
func requireTools(t *testing.T) {
	t.Helper()
	unittier.Skip(t, "it runs the real binaries, redis-servers and kills")
	if runtime.GOOS != "linux" {
		t.Skip("by design: the chaos suite reads /proc and relies on Linux parent-death signals")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; the chaos suite needs it (apt-get install redis-server)")
		}
		t.Skip("redis-server is not installed; the chaos suite needs it (apt-get install redis-server)")
	}
}
