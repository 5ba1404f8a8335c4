package contract

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Window is a weekly time window in which a rollout may start its waves
// (strategy.windows, `sluice apply --window`), written
//
//	DAYS HH:MM-HH:MM [ZONE]
//
// DAYS is a comma-separated list of days (Mon … Sun) and day ranges
// (Mon-Fri; a range may wrap, Fri-Mon), or * for every day; the times are
// on the clock of ZONE, an IANA time zone (Europe/Berlin) or UTC, the
// default. An end of 24:00 is the end of the day; an end before the start
// makes the window run past midnight into the next day (Fri 22:00-02:00
// opens Friday night). Examples: "Mon-Fri 09:00-16:00 Europe/Berlin",
// "Sat,Sun 00:00-24:00", "* 22:00-06:00 America/New_York".
type Window struct {
	text       string
	days       [7]bool // by time.Weekday: the days it opens on
	start, end int     // minutes of the day; end may be 24*60, or ≤ start (overnight)
	loc        *time.Location
}

func (w Window) String() string { return w.text }

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// ParseWindow parses one window; the error says what is wrong with it.
func ParseWindow(s string) (Window, error) {
	w := Window{text: strings.Join(strings.Fields(s), " ")}
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 3 {
		return w, fmt.Errorf("%q: want DAYS HH:MM-HH:MM [ZONE], e.g. \"Mon-Fri 09:00-16:00 Europe/Berlin\"", s)
	}
	if err := w.parseDays(f[0]); err != nil {
		return w, fmt.Errorf("%q: %w", s, err)
	}
	from, to, ok := strings.Cut(f[1], "-")
	var err error
	if !ok {
		return w, fmt.Errorf("%q: times %q: want HH:MM-HH:MM", s, f[1])
	}
	if w.start, err = clock(from, false); err != nil {
		return w, fmt.Errorf("%q: %w", s, err)
	}
	if w.end, err = clock(to, true); err != nil {
		return w, fmt.Errorf("%q: %w", s, err)
	}
	if w.start == w.end {
		return w, fmt.Errorf("%q: the window opens and closes at %s: it would never be open (00:00-24:00 is a whole day)", s, from)
	}
	w.loc = time.UTC
	if len(f) == 3 {
		if w.loc, err = time.LoadLocation(f[2]); err != nil {
			return w, fmt.Errorf("%q: time zone %q: want an IANA name such as Europe/Berlin, or UTC", s, f[2])
		}
	}
	return w, nil
}

func (w *Window) parseDays(s string) error {
	if s == "*" {
		w.days = [7]bool{true, true, true, true, true, true, true}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		a, b, isRange := strings.Cut(part, "-")
		from, ok := weekdays[strings.ToLower(a)]
		if !ok {
			return fmt.Errorf("days %q: %q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun, or * for every day)", s, a)
		}
		to := from
		if isRange {
			if to, ok = weekdays[strings.ToLower(b)]; !ok {
				return fmt.Errorf("days %q: %q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", s, b)
			}
		}
		for d := from; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == to {
				break
			}
		}
	}
	return nil
}

// clock parses HH:MM into minutes of the day; 24:00 only as an end.
func clock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	switch {
	case !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || mm < 0 || mm > 59 || hh < 0:
		return 0, fmt.Errorf("time %q: want HH:MM, e.g. 09:00", s)
	case hh == 24 && mm == 0 && end:
		return 24 * 60, nil
	case hh > 23:
		return 0, fmt.Errorf("time %q: hours go from 00 to 23 (24:00 only as the end)", s)
	}
	return hh*60 + mm, nil
}

// opening is when w opens on the date of day (in w's zone) and when it
// then closes. Minutes past 24 hours fall on the next day's wall clock
// (time.Date normalizes them), across a daylight-saving change too.
func (w Window) opening(day time.Time) (open, close time.Time) {
	y, mo, d := day.Date()
	end := w.end
	if end <= w.start {
		end += 24 * 60 // into the next day
	}
	return time.Date(y, mo, d, 0, w.start, 0, 0, w.loc), time.Date(y, mo, d, 0, end, 0, 0, w.loc)
}

// Open reports whether t falls within w, and when it closes if so, else
// when it opens next (within the coming week).
func (w Window) Open(t time.Time) (open bool, at time.Time) {
	lt := t.In(w.loc)
	// The window may have opened yesterday (overnight) or today.
	for _, back := range []int{-1, 0} {
		day := lt.AddDate(0, 0, back)
		if !w.days[day.Weekday()] {
			continue
		}
		o, c := w.opening(day)
		if !t.Before(o) && t.Before(c) {
			return true, c
		}
	}
	for ahead := 0; ahead <= 7; ahead++ {
		day := lt.AddDate(0, 0, ahead)
		if !w.days[day.Weekday()] {
			continue
		}
		if o, _ := w.opening(day); o.After(t) {
			return false, o
		}
	}
	return false, time.Time{} // no day: parseDays never allows it
}

// WindowsOpen reports whether t falls within any of ws (true when ws is
// empty: no windows, no restriction), and else when the first of them
// opens next.
func WindowsOpen(ws []Window, t time.Time) (open bool, next time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	for _, w := range ws {
		ok, at := w.Open(t)
		if ok {
			return true, at
		}
		if next.IsZero() || (!at.IsZero() && at.Before(next)) {
			next = at
		}
	}
	return false, next
}

// DescribeWindows is ws as a strategy shows them: "Mon-Fri 09:00-16:00
// Europe/Berlin or Sat 10:00-12:00".
func DescribeWindows(ws []Window) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, " or ")
}

// Frozen reports whether t falls within one of freezes, and if so until
// when: the end of the longest run of freezes that overlap or touch from t.
func Frozen(freezes []*sluicev1.Freeze, t time.Time) (frozen bool, until time.Time, by *sluicev1.Freeze) {
	until = t
	for moved := true; moved; {
		moved = false
		for _, f := range freezes {
			from, to := f.GetFrom().AsTime(), f.GetTo().AsTime()
			if !until.Before(from) && until.Before(to) {
				if by == nil {
					by = f
				}
				until, moved, frozen = to, true, true
			}
		}
	}
	return frozen, until, by
}
