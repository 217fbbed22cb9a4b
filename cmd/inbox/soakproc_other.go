//go:build !linux

package main

import "os/exec"

// dieWithParent has no kernel support here: the soak kills its processes
// when it returns.
func dieWithParent(*exec.Cmd) {}
