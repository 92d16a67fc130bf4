package testnode

import (
	"os/exec"
	"runtime"
	"sync"
)

// spawner runs the function it is given on one OS thread that never
// ends (see startOnSpawner).
var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		// Locked and never unlocked: this goroutine never returns, so
		// the thread lives as long as the process.
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// startOnSpawner starts cmd from a thread that never ends. The kernel
// sends Pdeathsig, which every node and every command run in one
// carries, when the thread that started the child ends, not the process;
// and other code of a test binary ends threads (sandbox.Private runs its
// work on a locked thread it lets end, to drop the mount namespace it
// made), which would kill a node started from that thread.
func startOnSpawner(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawner() <- func() { done <- cmd.Start() }
	return <-done
}
