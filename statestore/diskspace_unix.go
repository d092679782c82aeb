//go:build unix

package statestore

import (
	"errors"
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

// isNoSpace reports whether err is the filesystem's "no space left".
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
