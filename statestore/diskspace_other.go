//go:build !unix

package statestore

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
)

// freeBytes cannot measure free space here; stores then rely on the
// filesystem's own errors.
func freeBytes(string) (int64, bool) { return 0, false }

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error())
}

// usedBytes is the space a file takes; its length, here.
func usedBytes(info fs.FileInfo) int64 { return info.Size() }
