package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress reports the run's progress in one of two ways:
//
//   - bar: a one-line bar redrawn with '\r' on stderr,
//     [=====>    ] 3/12 case: phase, when stdout and stderr are both
//     terminals (or with -progress);
//   - lines: one complete line per finished case on stdout, when stdout
//     or stderr is not a terminal (a log file or a pipe gets no '\r'
//     fragments and sees each case as it ends).
//
// A nil *progress reports nothing.
type progress struct {
	bar         bool
	w           io.Writer
	total, done int
	start       time.Time
	last        int // length of the last bar line, for clearing
	now         func() time.Time
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newProgress chooses the bar (force, or stdout and stderr both
// terminals) or one line per case on stdout.
func newProgress(total int, force bool) *progress {
	if force || isTerminal(os.Stdout) && isTerminal(os.Stderr) {
		return newProgressTo(total, true, os.Stderr)
	}
	return newProgressTo(total, false, os.Stdout)
}

// newProgressTo reports to w, as a bar or as one line per case.
func newProgressTo(total int, bar bool, w io.Writer) *progress {
	return &progress{bar: bar, w: w, total: total, start: time.Now(), now: time.Now}
}

func (p *progress) elapsed() float64 { return p.now().Sub(p.start).Seconds() }

// phase shows what the current case is doing (bar only).
func (p *progress) phase(name, what string) {
	if p == nil || !p.bar {
		return
	}
	const width = 24
	fill := width * p.done / max(p.total, 1)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	line := fitWidth(fmt.Sprintf("[%s] %d/%d %5.0fs %s: %s", bar, p.done, p.total, p.elapsed(), name, what))
	pad := ""
	if len(line) < p.last {
		pad = strings.Repeat(" ", p.last-len(line))
	}
	p.last = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
}

// step counts a finished case; in line mode it prints the case's line.
func (p *progress) step(r *result) {
	if p == nil {
		return
	}
	p.done++
	if !p.bar && r != nil {
		p.line(r.c.Name, caseLine(r))
	}
}

// stepText counts a finished step that is not a case (the PyTorch run);
// in line mode it prints text.
func (p *progress) stepText(name, text string) {
	if p == nil {
		return
	}
	p.done++
	if !p.bar {
		p.line(name, text)
	}
}

// note reports a step inside the current phase (e.g. one PyTorch
// measurement): the bar shows it, line mode prints it without counting.
func (p *progress) note(name, text string) {
	if p == nil {
		return
	}
	if p.bar {
		p.phase(name, text)
		return
	}
	p.line(name, text)
}

// noteWriter passes the lines written to it to p.note (the PyTorch
// script's stderr reports each finished measurement) and keeps them all.
type noteWriter struct {
	p       *progress
	name    string
	partial []byte
	all     strings.Builder
}

func (w *noteWriter) Write(b []byte) (int, error) {
	w.all.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.partial[:i])); line != "" {
			w.p.note(w.name, line)
		}
		w.partial = w.partial[i+1:]
	}
	return len(b), nil
}

// line prints one entry of the line mode, "[done/total elapsed] name:
// text", wrapped at spaces into lines of at most termWidth columns.
func (p *progress) line(name, text string) {
	head := fmt.Sprintf("[%d/%d %4.0fs] %s:", p.done, p.total, p.elapsed(), name)
	for _, l := range wrapAfter(head, text, termWidth, progressIndent) {
		fmt.Fprintln(p.w, l)
	}
}

// progressIndent starts the continuation lines of a progress entry, so
// that each entry's first line is the only one starting with '['.
const progressIndent = "    "

// wrapAfter returns head (kept as it is, padding included) followed by the
// words of text, wrapped at spaces into lines of at most width bytes, the
// lines after the first indented by indent (a single word longer than a
// line stays whole).
func wrapAfter(head, text string, width int, indent string) []string {
	lines := []string{head}
	for _, w := range strings.Fields(text) {
		if last := lines[len(lines)-1]; len(last)+1+len(w) > width {
			lines = append(lines, indent+w)
		} else {
			lines[len(lines)-1] = last + " " + w
		}
	}
	return lines
}

// fitWidth cuts a progress bar line to termWidth columns (the bar is
// redrawn in place with '\r', which a wrapped line would break).
func fitWidth(line string) string {
	if r := []rune(line); len(r) > termWidth {
		return string(r[:termWidth])
	}
	return line
}

// caseLine summarises a finished case for the line mode.
func caseLine(r *result) string {
	if r.err != "" {
		return r.err
	}
	s := fmt.Sprintf("%s ms median of %d (best %s, worst %s), %s GFLOP/s", f1(r.timeMS), r.reps, f1(r.sp.best), f1(r.sp.worst), f1(r.gflops))
	if r.path != "" {
		s += ", path " + r.path
	}
	if r.load.ok {
		s += fmt.Sprintf(", others %.0f%% CPU, steal %.0f%%", 100*r.load.others, 100*r.load.steal)
	}
	if r.load.loadEnd > 0 {
		s += fmt.Sprintf(", load %.2f", r.load.loadEnd)
	}
	if len(r.noise) > 0 {
		s += " NOISY (" + strings.Join(r.noise, ", ") + ")"
	}
	if r.verify != "" {
		s += ", verify " + r.verify
	}
	return s
}

// finish clears the bar.
func (p *progress) finish() {
	if p == nil || !p.bar {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
}
