package findings

import (
	"errors"
	"testing"
)

func TestReport_Result(t *testing.T) {
	errA, errB := errors.New("a down"), errors.New("b down")
	for _, tc := range []struct {
		name    string
		given   func(*Report)
		wantOut string
		wantErr string
		wantIs  error
	}{
		{"no failure", func(r *Report) { r.Line("a up in %d ms", 3) }, "a up in 3 ms", "", nil},
		{"one failure", func(r *Report) { r.Line("c up"); r.Fail(errA) }, "c up\na down", "a down", errA},
		{"two failures name the first and count the rest", func(r *Report) { r.Fail(errA); r.Fail(errB) },
			"a down\nb down", "a down (and 1 more failures, see the output)", errA},
		{"added after", func(r *Report) {
			var o Report
			o.Line("d up")
			o.Fail(errB)
			r.Line("c up")
			r.Add(o)
		}, "c up\nd up\nb down", "b down", errB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			tc.given(&r)
			out, err := r.Result()
			if out != tc.wantOut {
				t.Errorf("output %q, want %q", out, tc.wantOut)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v, want %q matching %v", err, tc.wantErr, tc.wantIs)
			}
		})
	}
}
