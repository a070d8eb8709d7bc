// Package latency is the file of latency distributions that a bench run
// writes (go run . -samples FILE) and cmd/figures plots: per row, the
// quantiles of its samples in microseconds.
package latency

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// Levels are the quantiles a distribution is kept at: every half per cent,
// then 99.9% and the maximum. Level 0 is the minimum.
var Levels = levels()

func levels() []float64 {
	var l []float64
	for i := 0; i <= 199; i++ {
		l = append(l, float64(i)/200)
	}
	return append(l, 0.999, 1)
}

// A Dist is one row's distribution: N samples, and Us[i] the Levels[i]
// quantile in microseconds.
type Dist struct {
	N  int       `json:"n"`
	Us []float64 `json:"us"`
}

// Of summarises samples (nearest rank).
func Of(samples []time.Duration) Dist {
	s := slices.Clone(samples)
	slices.Sort(s)
	d := Dist{N: len(s), Us: make([]float64, len(Levels))}
	for i, p := range Levels {
		k := max(0, min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1))
		d.Us[i] = math.Round(float64(s[k])/float64(time.Microsecond)*10) / 10
	}
	return d
}

// A File is what one run measured and where.
type File struct {
	Run       string          `json:"run"`       // the command and the machine, for the caption
	Pairs     map[string]Dist `json:"pairs"`     // acquire+release pairs per contender
	Handovers map[string]Dist `json:"handovers"` // graceful handovers per mechanism, and the crash takeover lag
}

// Write writes f to path as indented JSON.
func (f *File) Write(path string) error {
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Read reads a File written by Write.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}
