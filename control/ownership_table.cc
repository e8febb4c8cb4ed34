// Ownership table with source precedence, sticky placements, and its state file.
#include "control/ownership_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/assert.h"
#include "base/fd.h"

namespace sluice::control {

std::string_view owner_source_name(OwnerSource s) {
  switch (s) {
    case OwnerSource::kPlaced:
      return "placed";
    case OwnerSource::kLearned:
      return "learned";
    case OwnerSource::kPinned:
      return "pinned";
  }
  return "unknown";
}

OwnershipTable::OwnershipTable(size_t node_count) : per_node_(node_count, 0) {}

void OwnershipTable::add_nodes(size_t node_count) {
  SLUICE_ASSERT(node_count >= per_node_.size());
  per_node_.resize(node_count, 0);
}

std::optional<Owner> OwnershipTable::winner(const Entry& e) {
  if (e.pinned != kNoNode) return Owner{e.pinned, OwnerSource::kPinned};
  if (e.learned != kNoNode) return Owner{e.learned, OwnerSource::kLearned};
  if (e.placed != kNoNode) return Owner{e.placed, OwnerSource::kPlaced};
  return std::nullopt;
}

std::optional<Owner> OwnershipTable::lookup(const QueueKey& key) const {
  const Entry* e = find(key);
  return e ? winner(*e) : std::nullopt;
}

const OwnershipTable::Entry* OwnershipTable::find(const QueueKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void OwnershipTable::account(const Entry& e, int sign) {
  if (e.placed != kNoNode) counts_[size_t(OwnerSource::kPlaced)] += uint64_t(int64_t(sign));
  if (e.learned != kNoNode) counts_[size_t(OwnerSource::kLearned)] += uint64_t(int64_t(sign));
  if (e.pinned != kNoNode) counts_[size_t(OwnerSource::kPinned)] += uint64_t(int64_t(sign));
  if (std::optional<Owner> w = winner(e)) per_node_[w->node] += uint32_t(int32_t(sign));
}

template <typename Change>
void OwnershipTable::update(const QueueKey& key, Change&& change) {
  auto [it, inserted] = entries_.try_emplace(key);
  if (!inserted) account(it->second, -1);
  const Entry before = it->second;
  change(it->second);
  if (tracking_ && (before.placed != it->second.placed || before.pinned != it->second.pinned)) {
    changed_.push_back(key);
  }
  if (it->second.empty()) {
    entries_.erase(it);
  } else {
    account(it->second, +1);
  }
}

NodeIndex OwnershipTable::place(const QueueKey& key, NodeIndex node) {
  SLUICE_ASSERT(node < per_node_.size());
  NodeIndex kept = node;
  update(key, [&](Entry& e) {
    if (e.placed == kNoNode) e.placed = node;
    kept = e.placed;
  });
  return kept;
}

void OwnershipTable::learn(const QueueKey& key, NodeIndex node) {
  SLUICE_ASSERT(node < per_node_.size());
  update(key, [&](Entry& e) { e.learned = node; });
}

std::vector<QueueKey> OwnershipTable::forget_learned_except(
    const std::function<bool(const QueueKey&)>& keep) {
  std::vector<QueueKey> gone;
  for (const auto& [key, e] : entries_) {
    if (e.learned != kNoNode && !keep(key)) gone.push_back(key);
  }
  for (const QueueKey& key : gone)
    update(key, [](Entry& e) { e.learned = kNoNode; });
  return gone;
}

std::optional<Owner> OwnershipTable::pin(const QueueKey& key, NodeIndex node) {
  SLUICE_ASSERT(node < per_node_.size());
  std::optional<Owner> before;
  update(key, [&](Entry& e) {
    before = winner(e);
    e.pinned = node;
  });
  return before;
}

void OwnershipTable::set_persisted(const QueueKey& key, NodeIndex placed, NodeIndex pinned) {
  SLUICE_ASSERT((placed == kNoNode || placed < per_node_.size()) &&
                (pinned == kNoNode || pinned < per_node_.size()));
  update(key, [&](Entry& e) {
    e.placed = placed;
    e.pinned = pinned;
  });
}

void OwnershipTable::touch_placed(const QueueKey& key, int64_t now_ms) {
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.placed != kNoNode) it->second.placed_seen_ms = now_ms;
}

std::vector<QueueKey> OwnershipTable::forget_unused_placed(int64_t now_ms, int64_t ttl_ms) {
  SLUICE_ASSERT(ttl_ms > 0);
  std::vector<QueueKey> gone;
  for (auto& [key, e] : entries_) {
    if (e.placed == kNoNode) continue;
    if (e.placed_seen_ms == 0 || e.learned != kNoNode || e.pinned != kNoNode) {
      e.placed_seen_ms = now_ms;  // loaded at start, or confirmed by a feed or a pin
      continue;
    }
    if (now_ms - e.placed_seen_ms >= ttl_ms) gone.push_back(key);
  }
  for (const QueueKey& key : gone)
    update(key, [](Entry& e) { e.placed = kNoNode; });
  return gone;
}

bool OwnershipTable::unpin(const QueueKey& key) {
  const Entry* e = find(key);
  if (!e || e->pinned == kNoNode) return false;
  update(key, [](Entry& x) { x.pinned = kNoNode; });
  return true;
}

// ---- state file ----------------------------------------------------------------------------

namespace {

constexpr std::string_view kMagic = "sluice-ownership 1";

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

// Names may hold any octet: whitespace, '%' and control octets are written as %XX.
void encode(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == 0x7f) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
}

std::optional<std::string> decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(size_t(n));
  }
  return true;
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string render_ownership(const OwnershipTable& table, std::span<const NodeSpec> nodes) {
  std::string body(kMagic);
  body += '\n';
  size_t entries = 0;
  table.for_each([&](const QueueKey& key, const OwnershipTable::Entry& e) {
    auto line = [&](std::string_view kind, NodeIndex node) {
      body += kind;
      body += ' ';
      encode(key.vhost, body);
      body += ' ';
      encode(key.queue, body);
      body += ' ';
      body += nodes[node].name;
      body += '\n';
      ++entries;
    };
    if (e.pinned != kNoNode) line("pinned", e.pinned);
    if (e.placed != kNoNode) line("placed", e.placed);
  });
  char end[64];
  std::snprintf(end, sizeof end, "end %zu %016llx\n", entries,
                static_cast<unsigned long long>(fnv1a(body)));
  body += end;
  return body;
}

Result<> save_ownership(const OwnershipTable& table, std::span<const NodeSpec> nodes,
                        const std::string& path) {
  return write_state_file(render_ownership(table, nodes), path);
}

Result<> write_state_file(std::string_view body, const std::string& path) {
  const std::string tmp = path + ".tmp";
  base::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd.valid()) return failure_in(tmp, 0, "", "cannot create: " + errno_text(errno));
  if (!write_all(fd.get(), body) || ::fsync(fd.get()) != 0) {
    const int e = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    return failure_in(tmp, 0, "", "cannot write: " + errno_text(e));
  }
  fd.reset();  // synced: close's result adds nothing
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return failure_in(path, 0, "", "cannot replace: " + errno_text(e));
  }
  // The rename is durable only once the directory is.
  const base::Fd dfd(::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid() || ::fsync(dfd.get()) != 0) {
    return failure_in(
        dir_of(path), 0, "",
        "cannot sync the directory after replacing " + path + ": " + errno_text(errno));
  }
  return {};
}

namespace {

// The body of an ownership file, everything before its last line, "end <entries> <checksum of
// everything before it>", once that line is found and the checksum matches; the entries it
// declares.
struct CheckedBody {
  std::string_view body;
  size_t declared = 0;
};
Result<CheckedBody> checked_body(const std::string& text) {
  if (text.empty() || text.back() != '\n') return failure("truncated (no final line end)");
  const size_t last_start = text.rfind('\n', text.size() - 2);
  const size_t end_at = last_start == std::string::npos ? 0 : last_start + 1;
  const std::string_view body(text.data(), end_at);
  const std::string last(text.data() + end_at, text.size() - end_at - 1);
  size_t declared = 0;
  unsigned long long sum = 0;
  if (std::sscanf(last.c_str(), "end %zu %llx", &declared, &sum) != 2) {
    return failure("truncated (no end line)");
  }
  if (sum != fnv1a(body)) return failure("checksum mismatch");
  return CheckedBody{body, declared};
}

// The four fields of an entry line, "placed|pinned VHOST QUEUE NODE"; nullopt for any other
// line.
std::optional<std::array<std::string_view, 4>> entry_fields(std::string_view line) {
  std::array<std::string_view, 4> f;
  size_t nf = 0;
  for (size_t at = 0;;) {
    const size_t sp = line.find(' ', at);
    if (nf == 4) return std::nullopt;
    f[nf++] = line.substr(at, sp == std::string_view::npos ? line.npos : sp - at);
    if (sp == std::string_view::npos) break;
    at = sp + 1;
  }
  if (nf != 4 || (f[0] != "placed" && f[0] != "pinned")) return std::nullopt;
  return f;
}

}  // namespace

Result<LoadedOwnership> load_ownership(OwnershipTable& table, std::span<const NodeSpec> nodes,
                                       const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return LoadedOwnership{};  // first start
    return failure_in(path, 0, "", "cannot read: " + errno_text(errno));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure_in(path, 0, "", "cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  auto damaged = [&](size_t line, const std::string& what) {
    // Keep the evidence, and start from nothing rather than from half a file.
    const std::string copy = path + ".corrupt";
    std::ofstream(copy, std::ios::binary | std::ios::trunc) << text;
    table = OwnershipTable(nodes.size());
    return failure_in(path, 0, "",
                      "damaged at line " + std::to_string(line) + ": " + what +
                          "; a copy is kept at " + copy + "; repair or remove the file to start");
  };

  Result<CheckedBody> checked = checked_body(text);
  if (!checked) return damaged(0, checked.error().message);
  const std::string_view body = checked->body;

  std::unordered_map<std::string_view, NodeIndex> by_name;
  for (size_t i = 0; i < nodes.size(); ++i)
    by_name.emplace(nodes[i].name, NodeIndex(i));

  LoadedOwnership loaded;
  size_t line_no = 0;
  size_t entries = 0;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t nl = body.find('\n', pos);
    const std::string_view line = body.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line_no == 1) {
      if (line != kMagic) return damaged(1, "not a sluice ownership file (version line)");
      continue;
    }
    const std::optional<std::array<std::string_view, 4>> fields = entry_fields(line);
    if (!fields) return damaged(line_no, "expected: placed|pinned VHOST QUEUE NODE");
    const std::array<std::string_view, 4>& f = *fields;
    std::optional<std::string> vhost = decode(f[1]), queue = decode(f[2]);
    if (!vhost || !queue) return damaged(line_no, "bad %-escape");
    ++entries;
    auto node = by_name.find(f[3]);
    if (node == by_name.end()) {
      loaded.dropped.push_back(std::string(f[0]) + " " + *vhost + " " + *queue + " on " +
                               std::string(f[3]));
      continue;
    }
    QueueKey key{std::move(*vhost), std::move(*queue)};
    if (f[0] == "pinned") {
      table.pin(key, node->second);
      ++loaded.pinned;
    } else {
      table.place(key, node->second);
      ++loaded.placed;
    }
  }
  if (entries != checked->declared)
    return damaged(line_no, "entry count does not match the end line");
  return loaded;
}

}  // namespace sluice::control
