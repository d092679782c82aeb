package runtime

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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
	// opens the stores of all its tasks.
	damagedStoresWindow = 10 * time.Minute
)

// damagedStores are the stores an instance deleted as damaged within the
// last damagedStoresWindow.
type damagedStores struct {
	mu    sync.Mutex
	found []damagedStore
}

type damagedStore struct {
	at  time.Time
	dir string
}

// openBadgerOrRebuild opens the badger store in dir. A store whose files
// are proven damaged (statestore.ErrCorrupt) is deleted and opened empty,
// with a warning, for its changelog (or topic) to rebuild it, unless too
// many were found at once (see admitDamaged). Any other failure is returned
// as it is and the files are left alone: a machine's error (a limit,
// permissions, a full or failing disk) names what to change, and an error
// of unknown cause is no proof that deleting the store would help.
func (a *App) openBadgerOrRebuild(dir string, opts statestore.BadgerOptions, logArgs ...any) (statestore.Store, error) {
	s, err := statestore.OpenBadger(dir, opts)
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
	return statestore.OpenBadger(dir, opts)
}

// admitDamaged records the store in dir as one to delete or, when that
// would make more than maxDamagedStores within damagedStoresWindow, returns
// an error wrapping ErrTooManyDamagedStores that names them. The error
// stops the instance wherever the store is opened (see openStandby).
func (a *App) admitDamaged(dir string, cause error) error {
	d := &a.damaged
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	recent := d.found[:0]
	for _, f := range d.found {
		if now.Sub(f.at) < damagedStoresWindow {
			recent = append(recent, f)
		}
	}
	d.found = recent
	if len(d.found) < maxDamagedStores {
		d.found = append(d.found, damagedStore{at: now, dir: dir})
		return nil
	}
	deleted := make([]string, len(d.found))
	for i, f := range d.found {
		deleted[i] = f.dir
	}
	return fmt.Errorf("%w: more than %d stores found damaged within %s; deleted %s to rebuild them; kept %s (%v) and any found after it: a cause common to them (a failing disk, files of another badger version, an error of the machine) is likelier than damage to each; check the disk and the files, then delete the damaged stores (or the state directory) to rebuild them",
		ErrTooManyDamagedStores, maxDamagedStores, damagedStoresWindow, strings.Join(deleted, ", "), dir, cause)
}
