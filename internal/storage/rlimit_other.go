//go:build !unix

package storage

func openFileLimit() (uint64, bool) { return 0, false }

func tooManyFiles(error) bool { return false }
