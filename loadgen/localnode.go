package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// LocalNodeConfig configures a local `syncnode serve --load-fixture`
// child process.
type LocalNodeConfig struct {
	// Binary is the syncnode executable.
	Binary string
	// Postgres, when set, is the PostgreSQL URL the node stores in;
	// otherwise it uses a SQLite file in a fresh data directory.
	Postgres string
	// Env is added to the child's environment.
	Env []string
}

// LocalNode is a running child node.
type LocalNode struct {
	// URL is the node's base URL.
	URL string

	cmd    *exec.Cmd
	dir    string
	stderr *tailBuffer
	exited chan struct{}
	err    error // the child's exit, once exited is closed
}

// startTimeout bounds how long a child node may take to listen.
const startTimeout = 2 * time.Minute

// StartLocalNode starts a load-fixture node on a free loopback port with
// a fresh data directory and returns once it prints its listening line.
func StartLocalNode(ctx context.Context, cfg LocalNodeConfig) (*LocalNode, error) {
	dir, err := os.MkdirTemp("", "syncnode-load-")
	if err != nil {
		return nil, fmt.Errorf("local node: %w", err)
	}
	args := []string{"serve", "--load-fixture", "--http", "127.0.0.1:0", "--data", dir, "--nats-port", "-1"}
	env := []string{"SYNCNODE_LOG_LEVEL=warn"}
	if cfg.Postgres != "" {
		// The fixture node wipes and seeds its partitions: it is the
		// schema's only writer, and says so.
		args = append(args, "--postgres", cfg.Postgres)
		env = append(env, "SYNCNODE_POSTGRES_SOLE_WRITER=true")
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(append(os.Environ(), env...), cfg.Env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("local node: %w", err)
	}
	n := &LocalNode{cmd: cmd, dir: dir, stderr: &tailBuffer{max: 16 << 10}, exited: make(chan struct{})}
	cmd.Stderr = n.stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("local node: %w", err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "syncnode: listening on "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		n.err = cmd.Wait()
		close(n.exited)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case n.URL = <-urls:
		return n, nil
	case <-n.exited:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("local node exited before listening: %v\n%s", n.err, n.stderr)
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = n.Stop()
	return nil, fmt.Errorf("local node did not start within %s (%v)\n%s", startTimeout, ctx.Err(), n.stderr)
}

// stopTimeout bounds a clean shutdown before the child is killed.
const stopTimeout = 30 * time.Second

// Stop interrupts the node, waits for it to shut down (killing it after
// stopTimeout) and removes its data directory.
func (n *LocalNode) Stop() error {
	defer os.RemoveAll(n.dir)
	_ = n.cmd.Process.Signal(os.Interrupt)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-n.exited:
	case <-timer.C:
		_ = n.cmd.Process.Kill()
		<-n.exited
		return fmt.Errorf("local node did not stop within %s; killed", stopTimeout)
	}
	if n.err != nil {
		return fmt.Errorf("local node: %w\n%s", n.err, n.stderr)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
