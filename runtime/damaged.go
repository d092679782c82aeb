package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// ErrTooManyDamagedStores stops an instance that found more than
// maxDamagedStores stores damaged within damagedStoresWindow: it keeps the
// others' files instead of deleting them.
var ErrTooManyDamagedStores = errors.New("runtime: too many damaged stores at once")

const (
	// maxDamagedStores is how many stores an instance deletes as damaged
	// within damagedStoresWindow before it stops instead. A crash damages
	// no store (badger recovers its logs itself); what does (a bad
	// sector, a file removed by hand) strikes one store's files at a time.
	// Many stores found damaged together share a cause that deleting them
	// would not remove, and could multiply: a failing disk or file system,
	// files of another badger version, an error of the machine mistaken
	// for damage. Three leaves room for the few stores of one task hit
	// together.
	maxDamagedStores = 3
	// damagedStoresWindow spans a start-up or a rebalance, when an instance
	// opens the stores of all its tasks, and the restarts a supervisor
	// makes of an instance that stops at once.
	damagedStoresWindow = 10 * time.Minute
	// damagedStoresFile records, in the application's state directory, the
	// stores deleted as damaged within the window, one "<unix ms> <dir>"
	// line each, so that restarting the instance does not start the count
	// again.
	damagedStoresFile = "damaged-stores"
)

// openBadgerOrRebuild opens the badger store in dir. A store whose files
// are proven damaged (statestore.ErrCorrupt) is deleted and opened empty,
// with a warning, for its changelog (or topic) to rebuild it, unless too
// many were found at once (see admitDamaged). A full disk is waited out
// (waitForSpace). Any other failure is returned as it is and the
// files are left alone: a machine's error (a limit, permissions, a failing
// disk) names what to change, and an error of unknown cause is no proof
// that deleting the store would help.
func (a *App) openBadgerOrRebuild(dir string, opts statestore.BadgerOptions, logArgs ...any) (statestore.Store, error) {
	var s statestore.Store
	open := func() error {
		var err error
		s, err = statestore.OpenBadger(dir, opts)
		return err
	}
	err := a.waitForSpace(dir, open)
	if err == nil || !errors.Is(err, statestore.ErrCorrupt) {
		return s, err
	}
	if err := a.admitDamaged(dir, err); err != nil {
		return nil, err
	}
	a.log.Warn("store files are damaged; deleting the store to rebuild it", append(logArgs, "dir", dir, "err", err)...)
	if derr := statestore.DestroyBadger(dir); derr != nil {
		return nil, fmt.Errorf("runtime: delete damaged store %s: %w (opening it failed with: %v)", dir, derr, err)
	}
	a.storesWiped.Add(1)
	err = a.waitForSpace(dir, open)
	return s, err
}

// admitDamaged records the store in dir as one to delete or, when that
// would make more than maxDamagedStores within damagedStoresWindow (this
// run's or an earlier one's), returns an error wrapping
// ErrTooManyDamagedStores that names them. The error stops the instance
// wherever the store is opened (see openStandby). A record that cannot be
// written fails too: the store is kept.
func (a *App) admitDamaged(dir string, cause error) error {
	// The lock spans the file's read and write: two stores found damaged
	// at once must each count the other. It guards nothing else.
	a.damagedMu.Lock()
	defer a.damagedMu.Unlock()
	path := filepath.Join(a.appDir(), damagedStoresFile)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("runtime: read %s: %w (store %s is damaged: %v)", path, err, dir, cause)
	}
	now := time.Now()
	var recent, dirs []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		ms, d, ok := strings.Cut(line, " ")
		at, err := strconv.ParseInt(ms, 10, 64)
		if ok && err == nil && now.Sub(time.UnixMilli(at)) < damagedStoresWindow {
			recent = append(recent, line+"\n")
			dirs = append(dirs, d)
		}
	}
	if len(recent) >= maxDamagedStores {
		return fmt.Errorf("%w: more than %d stores found damaged within %s; deleted %s to rebuild them; kept %s (%v) and any found after it: a cause common to them (a failing disk, files of another badger version, an error of the machine) is likelier than damage to each; check the disk and the files, then delete the damaged stores (or the state directory) to rebuild them",
			ErrTooManyDamagedStores, maxDamagedStores, damagedStoresWindow, strings.Join(dirs, ", "), dir, cause)
	}
	recent = append(recent, fmt.Sprintf("%d %s\n", now.UnixMilli(), dir))
	tmp := path + ".tmp"
	err = os.WriteFile(tmp, []byte(strings.Join(recent, "")), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("runtime: write %s: %w (store %s is damaged: %v)", path, err, dir, cause)
	}
	return nil
}
