package nft

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/iptables"
)

// tableFamily is the netlink family of f.
func tableFamily(f iptables.Family) nftables.TableFamily {
	if f == iptables.IPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

func chainType(c Chain) nftables.ChainType {
	if c.Type == "nat" {
		return nftables.ChainTypeNAT
	}
	return nftables.ChainTypeFilter
}

func chainHook(c Chain) *nftables.ChainHook {
	if c.Hook == "prerouting" {
		return nftables.ChainHookPrerouting
	}
	return nftables.ChainHookOutput
}

// exprs compiles r into the expressions nft would generate for its text
// form: each match loads a field into register 1 and compares it.
func (r Rule) exprs(f iptables.Family) []expr.Any {
	var out []expr.Any
	cmp := func(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }
	if r.Owner != nil {
		key := expr.MetaKeySKUID
		if r.Owner.GID {
			key = expr.MetaKeySKGID
		}
		out = append(out, &expr.Meta{Key: key, Register: 1}, cmp(binaryutil.NativeEndian.PutUint32(r.Owner.ID)))
	}
	// IPv4 source and destination sit at offsets 12 and 16 of the header,
	// IPv6 ones at 8 and 24.
	addr := func(a netip4or6, v4off, v6off uint32) {
		off, n := v4off, uint32(4)
		if f == iptables.IPv6 {
			off, n = v6off, 16
		}
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}, cmp(a))
	}
	if r.Saddr.IsValid() {
		addr(r.Saddr.AsSlice(), 12, 8)
	}
	if r.Daddr.IsValid() {
		addr(r.Daddr.AsSlice(), 16, 24)
	}
	if r.Proto != "" {
		proto := byte(unix.IPPROTO_UDP)
		if r.Proto == "tcp" {
			proto = unix.IPPROTO_TCP
		}
		out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmp([]byte{proto}))
		// Source and destination ports are the first two 16-bit fields of
		// both the UDP and the TCP header.
		if r.SPort != 0 {
			out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
				cmp(binaryutil.BigEndian.PutUint16(r.SPort)))
		}
		if r.DPort != 0 {
			out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				cmp(binaryutil.BigEndian.PutUint16(r.DPort)))
		}
	}
	switch {
	case r.Zone != 0:
		out = append(out,
			&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint16(r.Zone)},
			&expr.Ct{Key: expr.CtKeyZONE, Register: 1, SourceRegister: true},
			&expr.Verdict{Kind: expr.VerdictAccept})
	case r.Redirect != 0:
		out = append(out,
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.Redirect)},
			&expr.Redir{RegisterProtoMin: 1})
	case r.Accept:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	}
	return out
}

type netip4or6 = []byte

// comment is the rule's user data as nft writes a comment, so `nft list`
// shows it.
func (r Rule) comment() []byte {
	return userdata.AppendString(nil, userdata.TypeComment, "meshdns "+r.Comment)
}
