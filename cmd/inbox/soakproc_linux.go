package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill a soak process when the soak itself
// dies, so that no worker outlives a soak killed in its turn.
func dieWithParent(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
