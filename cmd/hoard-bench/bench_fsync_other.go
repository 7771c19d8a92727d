//go:build !linux

package main

func filesystemName(string) string { return "filesystem unknown" }
