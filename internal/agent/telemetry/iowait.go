package telemetry

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
)

// CPUTimes is the first ("cpu") line of Linux's /proc/stat, in clock
// ticks: what an input-bound judgement needs to know how long the host
// waited on I/O.
type CPUTimes struct {
	Total  uint64
	IOWait uint64
}

// ParseProcStat reads the aggregate cpu line of /proc/stat.
func ParseProcStat(b []byte) (CPUTimes, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 6 {
			return CPUTimes{}, errors.New("reading /proc/stat: short cpu line")
		}
		var t CPUTimes
		// user nice system idle iowait irq softirq steal (guest time is
		// already in user and nice).
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return CPUTimes{}, errors.New("reading /proc/stat: cpu line is not numbers")
			}
			t.Total += v
			if i == 4 {
				t.IOWait = v
			}
		}
		return t, nil
	}
	return CPUTimes{}, errors.New("reading /proc/stat: no cpu line")
}

// IOWaitFraction is the share of CPU time spent waiting on I/O between
// two readings, NaN when no time passed or the counters went back.
func IOWaitFraction(prev, cur CPUTimes) float64 {
	if cur.Total <= prev.Total || cur.IOWait < prev.IOWait {
		return math.NaN()
	}
	return float64(cur.IOWait-prev.IOWait) / float64(cur.Total-prev.Total)
}
