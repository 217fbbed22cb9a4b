package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"time"
)

// memSample is the process's resident set at one moment beside the Go
// runtime's share of memory, so that a peak can be told apart: what Go
// holds (heap, stacks, its own structures) and what it does not (the
// SQLite driver's C memory, page caches included, and the binary's text).
type memSample struct {
	RSSMB     float64 // VmRSS
	AnonMB    float64 // RssAnon: the Go runtime's memory and the driver's C memory
	FileMB    float64 // RssFile: mapped files, the binary's text above all
	GoMB      float64 // memory the Go runtime has mapped and not returned
	HeapMB    float64 // live and not yet swept heap objects
	StacksMB  float64 // goroutine stacks
	Goroutine int
}

var memMetrics = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
}

func sampleMem() (memSample, bool) {
	rss, ok := rssMB()
	if !ok {
		return memSample{}, false
	}
	anon, _ := procStatusKB("RssAnon")
	file, _ := procStatusKB("RssFile")
	m := make([]metrics.Sample, len(memMetrics))
	for i, name := range memMetrics {
		m[i].Name = name
	}
	metrics.Read(m)
	mb := func(i int) float64 { return float64(m[i].Value.Uint64()) / (1 << 20) }
	return memSample{
		RSSMB:     rss,
		AnonMB:    float64(anon) / 1024,
		FileMB:    float64(file) / 1024,
		GoMB:      mb(0) - mb(1),
		HeapMB:    mb(2),
		StacksMB:  mb(3) + mb(4),
		Goroutine: runtime.NumGoroutine(),
	}, true
}

// memWatch samples memory every interval and keeps the sample with the
// largest resident set, and every resident set read (8 bytes a sample: 80
// bytes a second of drain at 100 ms) for the median of the steady state.
type memWatch struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	peak  memSample
	ok    bool
	start time.Time
	at    []time.Duration
	rss   []float64
}

func watchMem(every time.Duration) *memWatch {
	w := &memWatch{stopc: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.take()
			select {
			case <-t.C:
			case <-w.stopc:
				return
			}
		}
	}()
	return w
}

func (w *memWatch) take() {
	s, ok := sampleMem()
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at = append(w.at, time.Since(w.start))
	w.rss = append(w.rss, s.RSSMB)
	if !w.ok || s.RSSMB > w.peak.RSSMB {
		w.peak, w.ok = s, true
	}
}

// stop ends the sampling and returns the sample of the largest resident
// set, false where the resident set cannot be read.
func (w *memWatch) stop() (memSample, bool) {
	close(w.stopc)
	<-w.done
	w.take()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, w.ok
}

// steadyMB is the median resident set of the samples taken in the later
// half of the watch: the drain's steady state, past the pool's warm-up,
// where the peak is its largest transient.
func (w *memWatch) steadyMB() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.at) == 0 {
		return -1
	}
	half := w.at[len(w.at)-1] / 2
	var late []float64
	for i, at := range w.at {
		if at >= half {
			late = append(late, w.rss[i])
		}
	}
	slices.Sort(late)
	return late[len(late)/2]
}

// writeHeapProfile writes the heap profile as of a fresh collection.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
