//go:build unix

package statestore

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
)

// freeBytes returns the space an unprivileged writer may still use in the
// filesystem holding dir.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), true
}

// isNoSpace reports whether err is the filesystem's "no space left", in
// its chain or, where badger flattened the chain, in its message.
func isNoSpace(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		if errors.Is(err, e) || strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	return false
}

// usedBytes is the space a file takes: the blocks allocated to it, which
// badger's preallocated, sparse files make far less than their length.
func usedBytes(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
