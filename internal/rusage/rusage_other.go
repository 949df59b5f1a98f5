//go:build !unix

package rusage

func self() Usage { return Usage{} }
