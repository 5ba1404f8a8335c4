package netcheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Protocol numbers for icmp.ParseMessage.
const (
	protoICMP   = 1
	protoICMPv6 = 58
)

// pinger is a raw ICMP socket of one family, bound to a device and, when
// src is valid, to a source address. It sends echoes to several
// destinations at once and matches their replies by ID, sequence, payload
// and source, so other pingers on the host do not confuse it.
type pinger struct {
	conn  *net.IPConn
	v6    bool
	id    uint16
	token []byte
}

// openPinger opens a pinger for v6 (or IPv4) from src (invalid: the kernel
// chooses) bound to device dev ("" = none). The socket lives in the network
// namespace of the calling thread.
func openPinger(ctx context.Context, v6 bool, src netip.Addr, dev string) (*pinger, error) {
	network, addr := "ip4:icmp", "0.0.0.0"
	if v6 {
		network, addr = "ip6:ipv6-icmp", "::"
	}
	if src.IsValid() {
		addr = src.String()
	}
	var lc net.ListenConfig
	if dev != "" {
		lc.Control = bindToDevice(dev)
	}
	c, err := lc.ListenPacket(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("open ICMP socket: %w", err)
	}
	token := binary.BigEndian.AppendUint64(nil, rand.Uint64())
	return &pinger{conn: c.(*net.IPConn), v6: v6, id: uint16(rand.Uint32()), token: append(token, "sluice"...)}, nil
}

// echoResult is what became of the echoes to one destination.
type echoResult struct {
	dst  netip.Addr
	rtt  time.Duration // with a reply
	sent int           // echoes sent
	err  error         // nil: a reply came
}

// outstanding is one echo on its way.
type outstanding struct {
	i  int // index of its destination
	at time.Time
}

// answer is what came back for an outstanding echo: a reply (err nil) or
// an ICMP error (an ErrUnreachable).
type answer struct {
	echo outstanding
	err  error
}

// echo sends echoes to each of dsts (distinct addresses of p's family)
// until it replies, an ICMP error comes back for it, wait has passed or ctx
// ends — resending every quarter of wait, so that one lost packet does not
// fail the probe — and closes p.
func (p *pinger) echo(ctx context.Context, dsts []netip.Addr, wait time.Duration) []echoResult {
	defer func() { _ = p.conn.Close() }()
	// Closing the socket is what wakes a blocked read when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = p.conn.Close() })
	defer stop()

	res := make([]echoResult, len(dsts))
	for i, d := range dsts {
		res[i].dst = d
	}
	start := time.Now()
	end := start.Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		end = dl
	}
	interval := max(wait/4, 10*time.Millisecond)
	next := make([]time.Time, len(dsts)) // zero: send now
	done := make([]bool, len(dsts))
	sendErr := make([]error, len(dsts))
	inflight := map[uint16]outstanding{}
	seq := uint16(rand.Uint32())
	pending := len(dsts)
	buf := make([]byte, 1500)
	for pending > 0 && ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		wake := end
		for i, d := range dsts {
			if done[i] {
				continue
			}
			if !now.Before(next[i]) {
				seq++
				if err := p.send(d, seq); err != nil {
					sendErr[i] = err
				} else {
					res[i].sent++
					inflight[seq] = outstanding{i: i, at: now}
				}
				next[i] = now.Add(interval)
			}
			if next[i].Before(wake) {
				wake = next[i]
			}
		}
		if err := p.conn.SetReadDeadline(wake); err != nil {
			break // closed: ctx ended
		}
		n, from, err := p.conn.ReadFromIP(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if ctx.Err() == nil {
				for i := range dsts {
					if !done[i] {
						res[i].err = fmt.Errorf("receive: %w", err)
					}
				}
			}
			break
		}
		fromAddr, _ := netip.AddrFromSlice(from.IP)
		a, ok := p.match(buf[:n], fromAddr.Unmap().WithZone(""), dsts, inflight)
		if !ok || done[a.echo.i] {
			continue
		}
		i := a.echo.i
		done[i], pending = true, pending-1
		res[i].err = a.err
		if a.err == nil {
			res[i].rtt = time.Since(a.echo.at)
		}
	}
	for i := range dsts {
		if done[i] || res[i].err != nil {
			continue
		}
		switch {
		case res[i].sent == 0 && sendErr[i] != nil:
			res[i].err = fail(ErrUnreachable, "cannot send an echo: %v", bare(sendErr[i]))
		case res[i].sent == 0:
			// The check's deadline passed before its first echo: a wait
			// computed from it would be zero or negative.
			res[i].err = fail(ErrNoReply, "no echo sent: the check's time ran out %s before it could send one", roundMs(time.Since(end)))
		case ctx.Err() != nil && time.Now().Before(end):
			res[i].err = fail(ErrNoReply, "no reply before the check was stopped after %s (%v)", roundMs(time.Since(start)), ctx.Err())
		case sendErr[i] != nil:
			res[i].err = fail(ErrNoReply, "no reply within %s (sending failed: %v)", roundMs(end.Sub(start)), bare(sendErr[i]))
		default:
			res[i].err = fail(ErrNoReply, "no reply within %s", roundMs(end.Sub(start)))
		}
	}
	return res
}

// send sends one echo request to dst.
func (p *pinger) send(dst netip.Addr, seq uint16) error {
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if p.v6 {
		// The kernel fills in the ICMPv6 checksum of a raw ICMPv6 socket.
		typ = ipv6.ICMPTypeEchoRequest
	}
	m := icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(p.id), Seq: int(seq), Data: p.token}}
	b, err := m.Marshal(nil)
	if err != nil {
		return err
	}
	_, err = p.conn.WriteToIP(b, &net.IPAddr{IP: dst.AsSlice()})
	return err
}

// match reads ICMP message b from from: ok when it answers one of p's
// outstanding echoes.
func (p *pinger) match(b []byte, from netip.Addr, dsts []netip.Addr, inflight map[uint16]outstanding) (answer, bool) {
	proto := protoICMP
	if p.v6 {
		proto = protoICMPv6
	}
	m, perr := icmp.ParseMessage(proto, b)
	if perr != nil {
		return answer{}, false
	}
	switch body := m.Body.(type) {
	case *icmp.Echo:
		if m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply {
			return answer{}, false
		}
		s, known := inflight[uint16(body.Seq)]
		if body.ID != int(p.id) || !known || !bytes.Equal(body.Data, p.token) || dsts[s.i] != from {
			return answer{}, false
		}
		return answer{echo: s}, true
	case *icmp.DstUnreach:
		return p.matchError(body.Data, m, from, dsts, inflight)
	case *icmp.TimeExceeded:
		return p.matchError(body.Data, m, from, dsts, inflight)
	}
	return answer{}, false
}

// matchError matches an ICMP error m, quoting the datagram orig, to the
// echo it is about.
func (p *pinger) matchError(orig []byte, m *icmp.Message, from netip.Addr, dsts []netip.Addr, inflight map[uint16]outstanding) (answer, bool) {
	var dst netip.Addr
	var echo []byte
	if p.v6 {
		// The fixed header only: our echoes carry no extension headers.
		if len(orig) < 40+8 || orig[6] != protoICMPv6 {
			return answer{}, false
		}
		dst = netip.AddrFrom16([16]byte(orig[24:40]))
		echo = orig[40:]
	} else {
		if len(orig) < 20 {
			return answer{}, false
		}
		ihl := int(orig[0]&0x0f) * 4
		if ihl < 20 || len(orig) < ihl+8 || orig[9] != protoICMP {
			return answer{}, false
		}
		dst = netip.AddrFrom4([4]byte(orig[16:20]))
		echo = orig[ihl:]
	}
	id, seq := binary.BigEndian.Uint16(echo[4:6]), binary.BigEndian.Uint16(echo[6:8])
	s, known := inflight[seq]
	if id != p.id || !known || dsts[s.i] != dst {
		return answer{}, false
	}
	return answer{echo: s, err: fail(ErrUnreachable, "%s (reported by %s)", describeICMPError(m), from)}, true
}

// describeICMPError names an ICMP error as an operator reads it.
func describeICMPError(m *icmp.Message) string {
	switch m.Type {
	case ipv4.ICMPTypeTimeExceeded, ipv6.ICMPTypeTimeExceeded:
		return "time exceeded"
	case ipv4.ICMPTypeDestinationUnreachable:
		switch m.Code {
		case 0:
			return "network unreachable"
		case 1:
			return "host unreachable"
		case 9, 10, 13:
			return "administratively prohibited"
		}
	case ipv6.ICMPTypeDestinationUnreachable:
		switch m.Code {
		case 0:
			return "no route to destination"
		case 1:
			return "administratively prohibited"
		case 3:
			return "address unreachable"
		}
	}
	return fmt.Sprintf("destination unreachable (code %d)", m.Code)
}

// bare is err without the addresses a *net.OpError adds: the line it goes
// in names them already.
func bare(err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		return oe.Err
	}
	return err
}

// roundMs rounds d for messages: 1s, 250ms.
func roundMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
