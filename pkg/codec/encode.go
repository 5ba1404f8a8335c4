package codec

import (
	"encoding/base64"
	"math/bits"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds protojson keeps Timestamp and Duration values in.
const (
	minTimestampSeconds = -62135596800 // 0001-01-01T00:00:00Z
	maxTimestampSeconds = 253402300799 // 9999-12-31T23:59:59Z
	maxDurationSeconds  = 315576000000 // 10,000 years
	nanosPerSecond      = 1_000_000_000
)

// encode appends m as a JSON object; false when m holds a value protojson
// refuses to write.
func (p *plan) encode(b []byte, m protoreflect.Message) ([]byte, bool) {
	b = append(b, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		if !m.Has(f.fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.key...)
		v := m.Get(f.fd)
		var ok bool
		switch {
		case f.isMap:
			b, ok = f.encodeMap(b, v.Map())
		case f.list:
			b, ok = f.encodeList(b, v.List())
		default:
			b, ok = f.encodeValue(b, v)
		}
		if !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func (f *field) encodeList(b []byte, l protoreflect.List) ([]byte, bool) {
	b = append(b, '[')
	for i := range l.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = f.encodeValue(b, l.Get(i)); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// encodeMap writes the entries in the order of their keys, as protojson
// does.
func (f *field) encodeMap(b []byte, m protoreflect.Map) ([]byte, bool) {
	keys := make([]string, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k.String())
		return true
	})
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if !utf8.ValidString(k) {
			return b, false
		}
		b = appendString(b, k)
		b = append(b, ':')
		var ok bool
		if b, ok = f.encodeValue(b, m.Get(protoreflect.ValueOfString(k).MapKey())); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func (f *field) encodeValue(b []byte, v protoreflect.Value) ([]byte, bool) {
	switch f.kind {
	case kString:
		s := v.String()
		if !utf8.ValidString(s) {
			return b, false
		}
		return appendString(b, s), true
	case kBool:
		return strconv.AppendBool(b, v.Bool()), true
	case kInt32:
		return strconv.AppendInt(b, v.Int(), 10), true
	case kUint32:
		return strconv.AppendUint(b, v.Uint(), 10), true
	case kInt64:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), true
	case kUint64:
		b = append(b, '"')
		return append(strconv.AppendUint(b, v.Uint(), 10), '"'), true
	case kEnum:
		n := v.Enum()
		if ev := f.enum.ByNumber(n); ev != nil {
			return appendString(b, string(ev.Name())), true
		}
		return strconv.AppendInt(b, int64(n), 10), true
	case kBytes:
		raw := v.Bytes()
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, raw)
		return append(b, '"'), true
	case kMessage:
		return f.msg.encode(b, v.Message())
	case kTimestamp:
		return appendTimestamp(b, v.Message())
	case kDuration:
		return appendDuration(b, v.Message())
	}
	return b, false
}

// secondsNanos reads a Timestamp's or a Duration's two fields.
func secondsNanos(m protoreflect.Message) (int64, int64) {
	switch v := m.Interface().(type) {
	case *timestamppb.Timestamp:
		return v.GetSeconds(), int64(v.GetNanos())
	case *durationpb.Duration:
		return v.GetSeconds(), int64(v.GetNanos())
	}
	fds := m.Descriptor().Fields()
	return m.Get(fds.ByNumber(1)).Int(), m.Get(fds.ByNumber(2)).Int()
}

// appendTimestamp writes t as protojson does: RFC 3339 in UTC with 0, 3, 6
// or 9 fractional digits.
func appendTimestamp(b []byte, m protoreflect.Message) ([]byte, bool) {
	secs, nanos := secondsNanos(m)
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= nanosPerSecond {
		return b, false
	}
	t := time.Unix(secs, nanos).UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, second, 2)
	b = append(b, '.')
	b = appendDigits(b, int(nanos), 9)
	b = trimFraction(b)
	return append(b, 'Z', '"'), true
}

// appendDigits writes n (≥ 0) in exactly width digits, zeros first.
func appendDigits(b []byte, n, width int) []byte {
	var buf [9]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, buf[:width]...)
}

// appendDuration writes d as protojson does: seconds with 0, 3, 6 or 9
// fractional digits and an "s".
func appendDuration(b []byte, m protoreflect.Message) ([]byte, bool) {
	secs, nanos := secondsNanos(m)
	if secs < -maxDurationSeconds || secs > maxDurationSeconds || nanos <= -nanosPerSecond || nanos >= nanosPerSecond ||
		(secs > 0 && nanos < 0) || (secs < 0 && nanos > 0) {
		return b, false
	}
	b = append(b, '"')
	if secs < 0 || nanos < 0 {
		b, secs, nanos = append(b, '-'), -secs, -nanos
	}
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, '.')
	b = appendDigits(b, int(nanos), 9)
	b = trimFraction(b)
	return append(b, 's', '"'), true
}

// trimFraction cuts a nine-digit fraction at the end of b to 6, 3 or no
// digits when the digits cut are zeros.
func trimFraction(b []byte) []byte {
	for range 2 {
		if n := len(b); string(b[n-3:]) == "000" {
			b = b[:n-3]
		}
	}
	if n := len(b); string(b[n-4:]) == ".000" {
		b = b[:n-4]
	}
	return b
}

// appendString writes s (valid UTF-8) as a JSON string, escaping what
// protojson escapes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= ' ' && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		start = i + 1
		b = append(b, '\\')
		switch c {
		case '"', '\\':
			b = append(b, c)
		case '\b':
			b = append(b, 'b')
		case '\f':
			b = append(b, 'f')
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			b = append(b, 'u')
			b = append(b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
