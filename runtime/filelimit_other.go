//go:build !unix

package runtime

// raiseFileLimit reports no limit: only unix systems have RLIMIT_NOFILE.
func raiseFileLimit() (uint64, error) { return 0, nil }
