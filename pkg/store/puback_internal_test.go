package store

import (
	"encoding/json"
	"testing"
)

// The hand-read acknowledgement agrees with encoding/json on every answer
// the server gives to a publish, and leaves anything odd to it.
func TestDecodePubAck_AgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"stream":"KV_sluice-nodeconfigs","seq":42}`,
		`{"stream":"KV_sluice-nodeconfigs","domain":"hub","seq":7}`,
		`{"stream":"KV_sluice-nodeconfigs","seq":9,"duplicate":true}`,
		`{"stream":"KV_sluice-nodeconfigs","seq":18446744073709551615}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_sluice-nodeconfigs","seq":0}`,
		`{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`,
		`{"stream":"KV_x","seq": 3}`,
		`{"stream":"KV_x","seq":3,"seq":4}`,
		`{"stream":"KV_x","seq":1e3}`,
		`{"stream":"KV_x"}`,
		`{"stream":"KV_x","seq":99999999999999999999}`,
		`not json`,
		``,
	} {
		var want, got pubAck
		wantErr := json.Unmarshal([]byte(in), &want)
		gotErr := decodePubAck([]byte(in), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("%s: error %v, encoding/json says %v", in, gotErr, wantErr)
			continue
		}
		if wantErr != nil {
			continue
		}
		if got.Seq != want.Seq || (got.Error == nil) != (want.Error == nil) ||
			got.Error != nil && *got.Error != *want.Error {
			t.Errorf("%s: got %+v (error %+v), encoding/json %+v (error %+v)", in, got, got.Error, want, want.Error)
		}
	}
	if seq, ok := plainAckSeq([]byte(`{"stream":"KV_x","seq":42}`)); !ok || seq != 42 {
		t.Errorf("a plain acknowledgement is not read by hand: %d, %v", seq, ok)
	}
}
