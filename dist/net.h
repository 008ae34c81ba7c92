// Addresses of this machine as the other machines of a job see them. A rank of a job across
// machines must tell the others an address they can reach it at: its host name may resolve to
// loopback (Debian's /etc/hosts maps it to 127.0.1.1, a container's to 127.0.0.1), and an address
// of the wrong network is no better. The address that routes to the master (the machine serving
// the job's store) is one the master, and so any machine that reaches it, can use.
#pragma once

#include <sys/socket.h>

#include <string>

namespace kiln::dist {

// The numeric text of a socket address ("10.0.0.2", "fe80::1"), an IPv4-mapped IPv6 address
// ("::ffff:10.0.0.2") as IPv4; "" for a family other than IPv4 and IPv6.
std::string numeric_address(const sockaddr* address);

// Whether `address` (numeric or "localhost") names this machine on every machine: 127.0.0.0/8,
// ::1, an IPv4-mapped loopback address, or "localhost".
bool is_loopback_address(const std::string& address);

// The address of this machine that the kernel would send from to reach `host` (a name or a
// numeric address) at `port`: the source of the route, found by connecting a UDP socket (no
// packet is sent). For a host that is this machine, the host's own address. "" when `host` does
// not resolve or no route leads there; `error` (when given) then says why.
std::string route_source(const std::string& host, int port, std::string* error = nullptr);

// The name of the network interface holding `address` ("eth0", "lo"), or "" when none does.
std::string interface_of(const std::string& address);

// The first IPv4 address (else IPv6, not link-local) of interface `name`, "" when it has none.
std::string address_of_interface(const std::string& name);

}  // namespace kiln::dist
