package codec

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// decoder reads the subset of protojson this package decodes itself. Every
// method reports false on anything outside it — the caller then leaves the
// whole input to protojson —, never an error of its own.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end says whether nothing but white space is left.
func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// next consumes c after white space.
func (d *decoder) next(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *decoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// str reads a string without escapes, in valid UTF-8; the bytes are d's.
func (d *decoder) str() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start, ascii := d.i, true
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < ' ':
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// integer reads a JSON number that is an integer written plainly,
// -?(0|[1-9][0-9]*), at d's position.
func (d *decoder) integer() (string, bool) {
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.i - digits
	if n == 0 || (n > 1 && d.b[digits] == '0') {
		return "", false
	}
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case '.', 'e', 'E':
			return "", false
		}
	}
	return string(d.b[start:d.i]), true
}

// message reads a JSON object into m (empty) by p.
func (d *decoder) message(p *plan, m protoreflect.Message) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	var seen, oneofs uint64
	direct, isStruct := p.structOf(m)
	for {
		name, ok := d.str()
		if !ok {
			return false
		}
		idx, ok := p.byName[string(name)]
		if !ok || seen&(1<<idx) != 0 {
			return false // unknown, by its proto name, or twice: protojson's to say
		}
		seen |= 1 << idx
		f := &p.fields[idx]
		if f.oneof > 0 {
			if oneofs&(1<<(f.oneof-1)) != 0 {
				return false
			}
			oneofs |= 1 << (f.oneof - 1)
		}
		if !d.next(':') || d.peek() == 'n' {
			return false
		}
		switch {
		case f.isMap:
			ok = d.mapOf(f, m.Mutable(f.fd).Map())
		case f.list:
			ok = d.list(f, m.Mutable(f.fd).List())
		case f.kind == kMessage:
			ok = d.message(f.msg, m.Mutable(f.fd).Message())
		default:
			var v protoreflect.Value
			if v, ok = d.value(f, func() protoreflect.Message { return m.Mutable(f.fd).Message() }); ok && v.IsValid() &&
				!(isStruct && p.setDirect(direct, idx, v)) {
				m.Set(f.fd, v)
			}
		}
		if !ok {
			return false
		}
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

func (d *decoder) list(f *field, l protoreflect.List) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if d.peek() == 'n' {
			return false
		}
		v, ok := d.element(f, l.NewElement)
		if !ok {
			return false
		}
		l.Append(v)
		if d.next(',') {
			continue
		}
		return d.next(']')
	}
}

func (d *decoder) mapOf(f *field, mp protoreflect.Map) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.next(':') || d.peek() == 'n' {
			return false
		}
		key := protoreflect.ValueOfString(string(k)).MapKey()
		if mp.Has(key) {
			return false // twice: protojson's to say
		}
		v, ok := d.element(f, mp.NewValue)
		if !ok {
			return false
		}
		mp.Set(key, v)
		if d.next(',') {
			continue
		}
		return d.next('}')
	}
}

// element reads one list element or map value of f; newValue makes an
// empty one (for a message, a Timestamp or a Duration).
func (d *decoder) element(f *field, newValue func() protoreflect.Value) (protoreflect.Value, bool) {
	if f.kind == kMessage {
		e := newValue()
		return e, d.message(f.msg, e.Message())
	}
	var e protoreflect.Value
	v, ok := d.value(f, func() protoreflect.Message { e = newValue(); return e.Message() })
	if ok && !v.IsValid() {
		v = e
	}
	return v, ok
}

// value reads one value of a field of kind other than kMessage. For a
// Timestamp or a Duration it fills the message newMsg returns and returns
// an invalid Value (the caller has set it already, or sets it).
func (d *decoder) value(f *field, newMsg func() protoreflect.Message) (protoreflect.Value, bool) {
	var none protoreflect.Value
	switch f.kind {
	case kString:
		s, ok := d.str()
		return protoreflect.ValueOfString(string(s)), ok
	case kBool:
		d.ws()
		switch {
		case bytes.HasPrefix(d.b[d.i:], []byte("true")):
			d.i += 4
			return protoreflect.ValueOfBool(true), true
		case bytes.HasPrefix(d.b[d.i:], []byte("false")):
			d.i += 5
			return protoreflect.ValueOfBool(false), true
		}
	case kInt32, kUint32:
		d.ws()
		s, ok := d.integer()
		if !ok {
			return none, false
		}
		if f.kind == kInt32 {
			n, err := strconv.ParseInt(s, 10, 32)
			return protoreflect.ValueOfInt32(int32(n)), err == nil
		}
		n, err := strconv.ParseUint(s, 10, 32)
		return protoreflect.ValueOfUint32(uint32(n)), err == nil
	case kInt64, kUint64:
		var s string
		var ok bool
		if d.peek() == '"' {
			var raw []byte
			if raw, ok = d.str(); ok {
				inner := decoder{b: raw}
				s, ok = inner.integer()
				ok = ok && inner.i == len(raw)
			}
		} else {
			s, ok = d.integer()
		}
		if !ok {
			return none, false
		}
		if f.kind == kInt64 {
			n, err := strconv.ParseInt(s, 10, 64)
			return protoreflect.ValueOfInt64(n), err == nil
		}
		n, err := strconv.ParseUint(s, 10, 64)
		return protoreflect.ValueOfUint64(n), err == nil
	case kEnum:
		s, ok := d.str()
		if !ok {
			return none, false
		}
		ev := f.enum.ByName(protoreflect.Name(s))
		if ev == nil {
			return none, false
		}
		return protoreflect.ValueOfEnum(ev.Number()), true
	case kBytes:
		s, ok := d.str()
		if !ok || len(s)%4 != 0 || bytes.ContainsAny(s, "-_") {
			return none, false
		}
		raw, err := base64.StdEncoding.DecodeString(string(s))
		return protoreflect.ValueOfBytes(raw), err == nil
	case kTimestamp:
		s, ok := d.str()
		if !ok {
			return none, false
		}
		secs, nanos, ok := parseTimestamp(string(s))
		if ok {
			setSecondsNanos(newMsg(), secs, nanos)
		}
		return none, ok
	case kDuration:
		s, ok := d.str()
		if !ok {
			return none, false
		}
		secs, nanos, ok := parseDuration(string(s))
		if ok = ok && secs >= -maxDurationSeconds && secs <= maxDurationSeconds; ok {
			setSecondsNanos(newMsg(), secs, nanos)
		}
		return none, ok
	}
	return none, false
}

func setSecondsNanos(m protoreflect.Message, secs int64, nanos int32) {
	switch v := m.Interface().(type) {
	case *timestamppb.Timestamp:
		v.Seconds, v.Nanos = secs, nanos
		return
	case *durationpb.Duration:
		v.Seconds, v.Nanos = secs, nanos
		return
	}
	fds := m.Descriptor().Fields()
	m.Set(fds.ByNumber(1), protoreflect.ValueOfInt64(secs))
	m.Set(fds.ByNumber(2), protoreflect.ValueOfInt32(nanos))
}

// parseTimestamp reads a Timestamp as protojson does (encoding/protojson,
// unmarshalTimestamp).
func parseTimestamp(s string) (int64, int32, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, 0, false
	}
	secs := t.Unix()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds {
		return 0, 0, false
	}
	i := strings.LastIndexByte(s, '.')
	j := strings.LastIndexAny(s, "Z-+")
	if i >= 0 && j >= i && j-i > len(".999999999") {
		return 0, 0, false
	}
	return secs, int32(t.Nanosecond()), true
}

// parseDuration reads a Duration's "[-+]S[.F]s" as protojson does
// (encoding/protojson, parseDuration), less the range check.
func parseDuration(input string) (int64, int32, bool) {
	b := []byte(input)
	if len(b) < 2 || b[len(b)-1] != 's' {
		return 0, 0, false
	}
	b = b[:len(b)-1]
	neg := false
	switch b[0] {
	case '-':
		neg, b = true, b[1:]
	case '+':
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, 0, false
	}
	var intp []byte
	switch {
	case b[0] == '0':
		b = b[1:]
	case '1' <= b[0] && b[0] <= '9':
		n := 1
		for n < len(b) && '0' <= b[n] && b[n] <= '9' {
			n++
		}
		intp, b = b[:n], b[n:]
	case b[0] == '.':
	default:
		return 0, 0, false
	}
	var nanos int64
	if len(b) > 0 {
		if b[0] != '.' {
			return 0, 0, false
		}
		b = b[1:]
		frac := [9]byte{'0', '0', '0', '0', '0', '0', '0', '0', '0'}
		n := 0
		for len(b) > 0 && n < 9 && '0' <= b[0] && b[0] <= '9' {
			frac[n], b, n = b[0], b[1:], n+1
		}
		if len(b) > 0 {
			return 0, 0, false
		}
		if digits := bytes.TrimLeft(frac[:], "0"); len(digits) > 0 {
			var err error
			if nanos, err = strconv.ParseInt(string(digits), 10, 32); err != nil {
				return 0, 0, false
			}
		}
	}
	var secs int64
	if len(intp) > 0 {
		var err error
		if secs, err = strconv.ParseInt(string(intp), 10, 64); err != nil {
			return 0, 0, false
		}
	}
	if neg {
		secs, nanos = -secs, -nanos
	}
	return secs, int32(nanos), true
}
