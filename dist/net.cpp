#include "kiln/dist/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace kiln::dist {

namespace {

// The ifaddrs list, freed however the walk ends.
class InterfaceAddresses {
 public:
  InterfaceAddresses() {
    if (::getifaddrs(&list_) != 0) list_ = nullptr;
  }
  ~InterfaceAddresses() {
    if (list_ != nullptr) ::freeifaddrs(list_);
  }
  InterfaceAddresses(const InterfaceAddresses&) = delete;
  InterfaceAddresses& operator=(const InterfaceAddresses&) = delete;
  const ifaddrs* first() const { return list_; }

 private:
  ifaddrs* list_ = nullptr;
};

bool is_link_local(const sockaddr* a) {
  if (a->sa_family != AF_INET6) return false;
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
  return IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr);
}

}  // namespace

std::string numeric_address(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    if (::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text) == nullptr) return "";
    return text;
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      in_addr v4{};
      std::memcpy(&v4, v6->sin6_addr.s6_addr + 12, sizeof v4);
      if (::inet_ntop(AF_INET, &v4, text, sizeof text) == nullptr) return "";
      return text;
    }
    if (::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text) == nullptr) return "";
    return text;
  }
  return "";
}

bool is_loopback_address(const std::string& address) {
  return address == "localhost" || address.starts_with("127.") || address == "::1" ||
         address.starts_with("::ffff:127.");
}

std::string route_source(const std::string& host, int port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    if (error != nullptr) *error = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return "";
  }
  std::string source;
  for (const addrinfo* a = found; a != nullptr && source.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      source = numeric_address(reinterpret_cast<const sockaddr*>(&local));
    } else if (error != nullptr) {
      *error = "no route to " + host + ": " + std::system_category().message(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return source;
}

std::string interface_of(const std::string& address) {
  InterfaceAddresses addresses;
  for (const ifaddrs* i = addresses.first(); i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && numeric_address(i->ifa_addr) == address) return i->ifa_name;
  return "";
}

std::string address_of_interface(const std::string& name) {
  InterfaceAddresses addresses;
  std::string v6;
  for (const ifaddrs* i = addresses.first(); i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || name != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET) return numeric_address(i->ifa_addr);
    if (v6.empty() && i->ifa_addr->sa_family == AF_INET6 && !is_link_local(i->ifa_addr))
      v6 = numeric_address(i->ifa_addr);
  }
  return v6;
}

}  // namespace kiln::dist
