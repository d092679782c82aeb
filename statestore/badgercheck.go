package statestore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// ErrCorruptTable marks a table file (.sst) of a store that fails its
// checksums or cannot be parsed: the store's files are damaged.
// errors.Is(err, ErrCorrupt) holds for it.
var ErrCorruptTable = fmt.Errorf("%w: corrupt badger table file", ErrCorrupt)

// checkTables reads the store in dir's manifest and every table file it
// lists, verifying their index and block checksums, before badger opens
// the store.
//
// Badger opens table files on goroutines of its own: a truncated one makes
// it panic there, out of reach of any recover, and a garbled block makes
// the first read of it panic (in a stream thread, a restoration or a query
// handler). Badger's own verification at open (ChecksumVerificationMode
// OnTableRead) would not do either: it drops a table that fails its
// checksum and opens the store without its keys. Here a damaged table
// fails the open with ErrCorruptTable, on the caller's goroutine, so the
// store can be deleted and rebuilt from its changelog.
//
// Only tables the manifest lists are read, each with the compression the
// manifest records for it: a table a crash left half written is not in the
// manifest yet, and badger deletes it when it opens the store. A manifest
// that does not parse, a listed table that is missing, and data files with
// no manifest at all fail the open with ErrCorrupt; an error of the system
// (a limit, a permission, a failing disk) is returned as it is.
// Encrypted tables are not checked (they need the key registry's keys).
// It reads every table once, decompressing its blocks.
func checkTables(dir string, bo badger.Options) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return checkNoData(dir)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	// Badger reports a manifest whose first bytes it cannot read as one
	// with a bad magic: a read that fails must stay a failed read.
	var magic [8]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	mf, _, err := badger.ReplayManifestFile(f, bo.ExternalMagicVersion, bo)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return err
		}
		return fmt.Errorf("%w: manifest %s: %v", ErrCorrupt, f.Name(), err)
	}
	ids := slices.Sorted(maps.Keys(mf.Tables))
	for _, id := range ids {
		tm := mf.Tables[id]
		if tm.KeyID != 0 {
			continue
		}
		err := checkTable(table.NewFilename(id, dir), table.Options{
			ReadOnly:             true,
			BlockSize:            bo.BlockSize,
			Compression:          tm.Compression,
			ZSTDCompressionLevel: bo.ZSTDCompressionLevel,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNoData fails for a store directory without a manifest that holds
// badger's data files. Badger writes its manifest before any other file and
// never removes it, so its absence is damage; badger itself would open such
// a store with a new, empty manifest, deleting the tables as unlisted and
// replaying only its memtable log, whose position record is recent: the
// store would report a current position over missing keys.
func checkNoData(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var data []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".sst", ".vlog", ".mem":
			data = append(data, e.Name())
		}
	}
	if len(data) == 0 {
		return nil // a new store
	}
	return fmt.Errorf("%w: no %s beside %d data files (%s first)", ErrCorrupt, badger.ManifestFilename, len(data), data[0])
}

// checkTable opens one table file read-only, verifies its checksums and
// closes it, turning a panic of badger's table code into an error. What the
// table holds decides ErrCorruptTable; failing to reach it (a limit, a
// permission) is returned as it is.
func checkTable(name string, opts table.Options) (err error) {
	info, err := os.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		// Badger writes a table before the manifest lists it, and removes
		// it from the manifest before deleting it.
		return fmt.Errorf("%w %s: listed in the manifest but missing", ErrCorruptTable, name)
	}
	if err != nil {
		return err
	}
	if info.Size() < 16 {
		return fmt.Errorf("%w %s: %d bytes: too short for a table", ErrCorruptTable, name, info.Size())
	}
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	// A table's Close is its file's: unlike DecrRef, it does not delete it.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %s: reading it panicked: %s", ErrCorruptTable, name, firstLine(fmt.Sprint(r)))
		}
		_ = mf.Close(-1)
	}()
	// Verified below, block by block, so that OpenTable leaves the file open
	// whatever it finds.
	opts.ChkMode = options.NoVerification
	t, err := table.OpenTable(mf, opts)
	if err == nil {
		err = t.VerifyChecksum()
	}
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrCorruptTable, name, err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// openError classifies the error an open of the store in dir failed with.
// A full disk becomes a DiskFullError, any other error of the system a
// MachineError naming what to change; an error that proves the files
// damaged (see badgerDamage) wraps ErrCorrupt; anything else is returned
// as it is, with no claim either way. The system's error is looked for
// first: whatever else a message says, a store that could not be read
// because of a limit is no proof of damage. Badger turns most errors into
// text (y.Wrap formats them with %+v), so both the chain and the message
// are searched.
func openError(dir string, reserve int64, err error) error {
	if isNoSpace(err) {
		return diskError(dir, reserve, err)
	}
	if errno, ok := machineErrno(err); ok {
		return &MachineError{Dir: dir, Errno: errno, Err: err}
	}
	if !errors.Is(err, ErrCorrupt) && badgerDamage(dir, err) {
		err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return fmt.Errorf("statestore: open badger %s: %w", dir, err)
}

// machineErrors are the system's errors that fail an open because of the
// machine, each with what to change. ENFILE's message contains EMFILE's,
// so it comes first.
var machineErrors = []struct {
	errno syscall.Errno
	hint  string
}{
	{syscall.ENFILE, "the system's table of open files is full: raise fs.file-max (sysctl)"},
	{syscall.EMFILE, "the process reached its limit of open files: raise RLIMIT_NOFILE (ulimit -n, LimitNOFILE= under systemd, the container's nofile ulimit); every open store holds several files"},
	{syscall.EACCES, "permission denied: give the process's user read and write access to the state directory"},
	{syscall.EPERM, "operation not permitted: give the process's user read and write access to the state directory"},
	{syscall.EROFS, "the file system is read-only: remount it read-write"},
	{syscall.EIO, "the disk reported an input/output error: check it (dmesg, SMART)"},
	{syscall.ENOMEM, "out of memory or of memory mappings: raise the memory limit or vm.max_map_count; every open store maps its table files"},
}

// machineErrno finds a machine error in err's chain or, where badger
// flattened the chain, in its message.
func machineErrno(err error) (syscall.Errno, bool) {
	for _, m := range machineErrors {
		if errors.Is(err, m.errno) {
			return m.errno, true
		}
	}
	msg := err.Error()
	for _, m := range machineErrors {
		if strings.Contains(msg, m.errno.Error()) {
			return m.errno, true
		}
	}
	return 0, false
}

func machineHint(errno syscall.Errno) string {
	for _, m := range machineErrors {
		if m.errno == errno {
			return m.hint
		}
	}
	return errno.Error()
}

// badgerDamageTexts are what badger (v4.9.6) says when opening a store
// whose files contradict each other or themselves: the manifest's own
// checks, a table the manifest lists and the directory lacks, tables whose
// key ranges overlap, a checksum, a log header naming an encryption key the
// store never had, a log entry that does not parse. Its errors reach here
// as text.
var badgerDamageTexts = []string{
	"manifest has bad magic",
	"manifest has checksum mismatch",
	"manifest has unsupported version",
	"external magic number doesn't match",
	"Manifest file might be corrupted",
	"MANIFEST invalid, table",
	"MANIFEST file has invalid manifestChange op",
	"file does not exist for table",
	"Level validation",
	"checksum mismatch",
	"CHECKSUM_MISMATCH",
	badger.ErrInvalidDataKeyID.Error(),
	"while iterating wal",
	"while iterating over:",
}

// badgerDamage reports whether err is badger's word that the files of the
// store in dir are damaged. The paths in the message are left out: a store
// may be named CHECKSUM_MISMATCH.
func badgerDamage(dir string, err error) bool {
	msg := strings.ReplaceAll(err.Error(), dir, "")
	for _, t := range badgerDamageTexts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}
