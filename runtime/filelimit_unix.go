//go:build unix

package runtime

import "syscall"

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the soft limit then in force.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		raised := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return lim.Cur, nil
		}
		lim = raised
	}
	return lim.Cur, nil
}
