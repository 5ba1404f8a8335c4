package hostnet

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// IPv4 per-device settings (IPV4_DEVCONF_* in linux/ip.h): the index of a
// setting in IFLA_INET_CONF, counted from 1.
const (
	devconfARPAnnounce = 18
	devconfARPIgnore   = 19
)

// nlaTypeMask strips the flag bits from a netlink attribute type.
const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// The ARP policy of a strict link (Link.ARPStrict).
const (
	strictARPIgnore   = 1 // answer only for addresses on the link itself
	strictARPAnnounce = 2 // ask with an address of the link itself
)

// devconf reads and sets IPv4 per-device settings (the sysctls under
// net.ipv4.conf.<link>) over rtnetlink, which the netlink library has no
// calls for. It uses a socket of its own in the applier's namespace.
type devconf struct {
	sockets map[int]*nl.SocketHandle
}

func openDevconf(ns netns.NsHandle) (*devconf, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := s.SetReceiveTimeout(&nl.SocketTimeoutTv); err != nil {
		s.Close()
		return nil, err
	}
	return &devconf{sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}}, nil
}

func (c *devconf) Close() { c.sockets[unix.NETLINK_ROUTE].Close() }

// strictARP returns, by link index, whether each link has the strict ARP
// policy.
func (c *devconf) strictARP() (map[int]bool, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.Sockets = c.sockets
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	strict := map[int]bool{}
	for _, m := range msgs {
		ifi := nl.DeserializeIfInfomsg(m)
		conf, err := inetConf(m[ifi.Len():])
		if err != nil {
			return nil, fmt.Errorf("link %d: %w", ifi.Index, err)
		}
		if len(conf) >= devconfARPIgnore {
			strict[int(ifi.Index)] = conf[devconfARPIgnore-1] == strictARPIgnore && conf[devconfARPAnnounce-1] == strictARPAnnounce
		}
	}
	return strict, nil
}

// inetConf finds IFLA_AF_SPEC / AF_INET / IFLA_INET_CONF in the attributes
// of a link message: the settings in devconf order (nil if absent).
func inetConf(b []byte) ([]uint32, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return nil, err
	}
	for _, a := range attrs {
		if a.Attr.Type&nlaTypeMask != unix.IFLA_AF_SPEC {
			continue
		}
		afs, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return nil, err
		}
		for _, af := range afs {
			if af.Attr.Type&nlaTypeMask != unix.AF_INET {
				continue
			}
			inet, err := nl.ParseRouteAttr(af.Value)
			if err != nil {
				return nil, err
			}
			for _, x := range inet {
				if x.Attr.Type&nlaTypeMask == unix.IFLA_INET_CONF {
					conf := make([]uint32, len(x.Value)/4)
					for i := range conf {
						conf[i] = nl.NativeEndian().Uint32(x.Value[4*i:])
					}
					return conf, nil
				}
			}
		}
	}
	return nil, nil
}

// setStrictARP gives the link with index the strict ARP policy.
func (c *devconf) setStrictARP(index int) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	req.Sockets = c.sockets
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	conf := nl.NewRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(devconfARPIgnore, nl.Uint32Attr(strictARPIgnore))
	conf.AddRtAttr(devconfARPAnnounce, nl.Uint32Attr(strictARPAnnounce))
	inet := nl.NewRtAttr(unix.AF_INET, nil)
	inet.AddChild(conf)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	spec.AddChild(inet)
	req.AddData(spec)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
