package main

import "syscall"

// filesystemName names the filesystem dir is on when it matters to an
// fsync figure: tmpfs, where fsync is free.
func filesystemName(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "filesystem unknown"
	}
	const tmpfsMagic = 0x01021994
	if st.Type == tmpfsMagic {
		return "tmpfs"
	}
	return "on disk"
}
