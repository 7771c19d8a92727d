package localredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Adoption: why a new hoard takes over the redis-server a crashed one left
// running, rather than starting its own.
//
// After a SIGKILL of hoard, warriors must be served again within seconds
// at any AOF size, and a replay takes seconds per 100 MB (see aof.go). So
// with Config.OutliveCrash the redis-server outlives its hoard (under a
// keeper, keeper_linux.go, which stops it if nobody adopts it within the
// orphan grace), and the next Start finds it by the redis lock it holds,
// reaches it at the address recorded in addrFileName, checks that it is
// the one the pidfile names, and supervises it from then on: it is
// restarted if it dies and stopped by Stop, like a child. An adoption
// costs a connection and an INFO: milliseconds, whatever the data.
//
// Only the supervisor holding the owner lock adopts, so two hoards never
// share one redis-server's supervision; a redis-server holding the redis
// lock that does not answer is on its way out and is waited for.

// writeAddrFile records where a redis-server launched now will listen, for
// the hoard that may adopt it.
func writeAddrFile(dataDir, network, address string) error {
	path := filepath.Join(dataDir, addrFileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(network+" "+address+"\n"), 0o600); err != nil {
		return fmt.Errorf("localredis: record the address: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("localredis: record the address: %w", err)
	}
	return nil
}

func readAddrFile(dataDir string) (network, address string, err error) {
	content, err := os.ReadFile(filepath.Join(dataDir, addrFileName))
	if err != nil {
		return "", "", err
	}
	network, address, ok := strings.Cut(strings.TrimSpace(string(content)), " ")
	if !ok || (network != "unix" && network != "tcp") || address == "" {
		return "", "", fmt.Errorf("malformed %s: %q", addrFileName, content)
	}
	return network, address, nil
}

// adopt takes over the redis-server holding the data dir's redis lock, if
// it answers at the recorded address and is the one the pidfile names.
// One listening elsewhere than Config.Port asks is stopped instead (its
// address cannot change while it runs), and the error says to launch anew.
func (s *Server) adopt(ctx context.Context, dataDir string) (*instance, error) {
	network, address, err := readAddrFile(dataDir)
	if err != nil {
		return nil, fmt.Errorf("no address to reach it at: %w", err)
	}
	s.mu.Lock()
	s.network, s.address = network, address
	s.mu.Unlock()
	fields, err := s.info(ctx, "server")
	if err != nil {
		return nil, fmt.Errorf("no answer at %s %s: %w", network, address, err)
	}
	pid, err := strconv.Atoi(fields["process_id"])
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("no process_id in its INFO")
	}
	pidFile, err := os.ReadFile(filepath.Join(dataDir, pidFileName))
	if err != nil {
		return nil, fmt.Errorf("read pidfile: %w", err)
	}
	if strings.TrimSpace(string(pidFile)) != strconv.Itoa(pid) {
		return nil, fmt.Errorf("the redis-server at %s %s has pid %d, the pidfile says %s", network, address, pid, strings.TrimSpace(string(pidFile)))
	}
	inst := &instance{startedAt: time.Now(), adopted: true, gone: make(chan struct{})}
	inst.pid.Store(int64(pid))
	go s.watchGone(inst, dataDir)
	if want := s.cfg.Port; want > 0 && (network != "tcp" || address != net.JoinHostPort("127.0.0.1", strconv.Itoa(want))) {
		s.logger.Info("the redis-server left running listens elsewhere than asked; stopping it to start one on the port asked for",
			"pid", pid, "network", network, "address", address, "port", want)
		if err := s.terminate(inst); err != nil {
			s.logger.Warn("stopping the redis-server left running", "error", err)
		}
		return nil, errors.New("it listened elsewhere and was stopped")
	}
	return inst, nil
}
