package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrStateDirLocked is returned by Start when another instance holds the
// application's state directory.
var ErrStateDirLocked = errors.New("runtime: state directory is locked by another instance")

// stateDir is an application's folder under Config.StateDir, held with an
// exclusive lock for as long as the instance runs.
type stateDir struct {
	path      string
	lock      *os.File
	processID string
}

const (
	lockFileName      = ".lock"
	processIDFileName = "process-id"
)

// openStateDir creates and locks dir. The lock is an flock on a file inside
// it, which the kernel drops if the process dies, so a crash never leaves a
// stale lock behind.
func openStateDir(dir string) (*stateDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: create state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runtime: open state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (is another instance running with the same StateDir and ApplicationID?)", ErrStateDirLocked, dir)
		}
		return nil, fmt.Errorf("runtime: lock state directory %s: %w", dir, err)
	}
	sd := &stateDir{path: dir, lock: f}
	if sd.processID, err = loadProcessID(dir); err != nil {
		sd.close()
		return nil, err
	}
	return sd, nil
}

// loadProcessID reads the instance's stable process ID, creating it on first
// use. The ID outlives restarts so the assignor can recognise a returning
// instance and the state it kept.
func loadProcessID(dir string) (string, error) {
	p := filepath.Join(dir, processIDFileName)
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("runtime: read process ID: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("runtime: generate process ID: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("runtime: write process ID: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("runtime: write process ID: %w", err)
	}
	return id, nil
}

func (s *stateDir) close() error {
	if s.lock == nil {
		return nil
	}
	// Closing the descriptor releases the flock.
	err := s.lock.Close()
	s.lock = nil
	return err
}
