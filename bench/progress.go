package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// progress draws a one-line bar on stderr: [=====>    ] 3/12 case: phase.
// A nil *progress draws nothing.
type progress struct {
	total, done int
	start       time.Time
	last        int // length of the last line, for clearing
}

// newProgress returns a bar when enabled (flag -progress, or stderr is a
// terminal), else nil.
func newProgress(total int, force bool) *progress {
	if !force {
		fi, err := os.Stderr.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return nil
		}
	}
	return &progress{total: total, start: time.Now()}
}

func (p *progress) phase(name, what string) {
	if p == nil {
		return
	}
	const width = 24
	fill := width * p.done / max(p.total, 1)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	line := fmt.Sprintf("[%s] %d/%d %5.0fs %s: %s", bar, p.done, p.total, time.Since(p.start).Seconds(), name, what)
	pad := ""
	if len(line) < p.last {
		pad = strings.Repeat(" ", p.last-len(line))
	}
	p.last = len(line)
	fmt.Fprintf(os.Stderr, "\r%s%s", line, pad)
}

func (p *progress) step() {
	if p != nil {
		p.done++
	}
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "\r%s\r", strings.Repeat(" ", p.last))
}
