package contract

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestParseWindow_Errors(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "want DAYS HH:MM-HH:MM",
		"Mon-Fri":                        "want DAYS HH:MM-HH:MM",
		"Mon-Fry 09:00-16:00":            `"Fry" is not a day`,
		"Mox 09:00-16:00":                `"Mox" is not a day`,
		"Mon 9:00-16:00":                 `time "9:00": want HH:MM`,
		"Mon 09:00":                      "want HH:MM-HH:MM",
		"Mon 09:00-16:60":                `time "16:60"`,
		"Mon 24:00-02:00":                "24:00 only as the end",
		"Mon 09:00-09:00":                "would never be open",
		"Mon 09:00-16:00 Mars/Olympus":   `time zone "Mars/Olympus"`,
		"Mon 09:00-16:00 UTC extra word": "want DAYS HH:MM-HH:MM",
	} {
		_, err := ParseWindow(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWindow(%q) = %v; want an error containing %q", in, err, want)
		}
	}
}

func TestWindow_Open(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string, loc *time.Location) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// 2026-11-27 is a Friday.
	tests := []struct {
		window, now string
		loc         *time.Location
		open        bool
		at          string // when it closes (open) or opens next (closed), in loc
	}{
		{"Mon-Fri 09:00-16:00 Europe/Berlin", "2026-11-27 10:00", berlin, true, "2026-11-27 16:00"},
		{"Mon-Fri 09:00-16:00 Europe/Berlin", "2026-11-27 16:00", berlin, false, "2026-11-30 09:00"}, // closes at 16:00 sharp
		{"Mon-Fri 09:00-16:00 Europe/Berlin", "2026-11-28 12:00", berlin, false, "2026-11-30 09:00"}, // Saturday
		{"Mon-Fri 09:00-16:00 Europe/Berlin", "2026-11-27 08:59", berlin, false, "2026-11-27 09:00"},
		{"Mon-Fri 09:00-16:00 Europe/Berlin", "2026-11-27 08:30", time.UTC, true, "2026-11-27 15:00"}, // 09:30 in Berlin
		{"Fri 22:00-02:00", "2026-11-28 01:30", time.UTC, true, "2026-11-28 02:00"},                   // Saturday night, opened Friday
		{"Fri 22:00-02:00", "2026-11-28 02:00", time.UTC, false, "2026-12-04 22:00"},
		{"Sat,Sun 00:00-24:00", "2026-11-29 23:59", time.UTC, true, "2026-11-30 00:00"},
		{"Fri-Mon 10:00-11:00", "2026-11-30 10:30", time.UTC, true, "2026-11-30 11:00"}, // a range that wraps
		{"Fri-Mon 10:00-11:00", "2026-12-01 10:30", time.UTC, false, "2026-12-04 10:00"},
		{"* 22:00-06:00", "2026-11-27 05:00", time.UTC, true, "2026-11-27 06:00"},
		// Daylight saving ends in Berlin on 2026-10-25 at 03:00: the window
		// still closes at 16:00 on the wall clock.
		{"Sun 09:00-16:00 Europe/Berlin", "2026-10-25 12:00", berlin, true, "2026-10-25 16:00"},
	}
	for _, tt := range tests {
		w, err := ParseWindow(tt.window)
		if err != nil {
			t.Fatal(err)
		}
		open, when := w.Open(at(tt.now, tt.loc))
		if open != tt.open || !when.Equal(at(tt.at, tt.loc)) {
			t.Errorf("%q at %s %s: open %v until/at %s; want %v, %s", tt.window, tt.now, tt.loc, open, when.In(tt.loc).Format("2006-01-02 15:04"), tt.open, tt.at)
		}
	}
}

func TestWindowsOpen(t *testing.T) {
	a, _ := ParseWindow("Mon 09:00-10:00")
	b, _ := ParseWindow("Wed 09:00-10:00")
	mon := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC) // a Monday, after a
	if open, next := WindowsOpen([]Window{a, b}, mon); open || !next.Equal(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("after Monday's window: open %v next %s; want closed until Wednesday 09:00", open, next)
	}
	if open, _ := WindowsOpen(nil, mon); !open {
		t.Errorf("no windows: want open")
	}
	if got := DescribeWindows([]Window{a, b}); got != "Mon 09:00-10:00 or Wed 09:00-10:00" {
		t.Errorf("DescribeWindows = %q", got)
	}
}

func TestFrozen(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 24, h, 0, 0, 0, time.UTC) }
	f := func(id string, from, to int) *sluicev1.Freeze {
		return &sluicev1.Freeze{Id: id, From: timestamppb.New(at(from)), To: timestamppb.New(at(to))}
	}
	// Two freezes that touch make one: 10-12 then 12-14; another at 16-18.
	fs := []*sluicev1.Freeze{f("b", 12, 14), f("a", 10, 12), f("c", 16, 18)}
	for _, tt := range []struct {
		at     int
		frozen bool
		until  int
		by     string
	}{{9, false, 9, ""}, {10, true, 14, "a"}, {13, true, 14, "b"}, {14, false, 14, ""}, {17, true, 18, "c"}} {
		frozen, until, by := Frozen(fs, at(tt.at))
		if frozen != tt.frozen || !until.Equal(at(tt.until)) || by.GetId() != tt.by {
			t.Errorf("at %d:00: frozen %v until %s by %q; want %v until %d:00 by %q", tt.at, frozen, until.Format("15:04"), by.GetId(), tt.frozen, tt.until, tt.by)
		}
	}
}
