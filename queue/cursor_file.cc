// Cursor file encoding and its atomic replacement.
#include "queue/cursor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "queue/crc32c.h"

namespace sluice::queue {
namespace {

constexpr uint64_t kCursorMagic = 0x5255435349554C53ull;  // "SLUISCUR"
constexpr uint32_t kCursorVersion = 1;
constexpr size_t kFixedBytes = 8 + 4 + 4 + 8 + 8;  // magic, version, count, seq_high, (crc+pad)

template <typename T>
void put(std::string& s, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  s.append(b, sizeof v);
}
template <typename T>
bool get(const std::string& s, size_t& pos, T* v) {
  if (s.size() - pos < sizeof(T)) return false;
  std::memcpy(v, s.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

std::string errno_text(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

}  // namespace

std::string encode_cursors(const CursorSnapshot& s) {
  std::string out;
  put<uint64_t>(out, kCursorMagic);
  put<uint32_t>(out, kCursorVersion);
  put<uint32_t>(out, uint32_t(s.entries.size()));
  put<uint64_t>(out, s.seq_high);
  for (const CursorEntry& e : s.entries) {
    put<uint16_t>(out, uint16_t(e.vhost.size()));
    put<uint16_t>(out, uint16_t(e.queue.size()));
    put<uint64_t>(out, e.delivered_seq);
    out += e.vhost;
    out += e.queue;
  }
  put<uint32_t>(out, crc32c(0, out.data(), out.size()));
  put<uint32_t>(out, 0);
  return out;
}

Result<CursorSnapshot> decode_cursors(const std::string& bytes) {
  CursorSnapshot out;
  if (bytes.size() < kFixedBytes) {
    return failure("too short");
  }
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 4);
  if (stored != crc32c(0, bytes.data(), bytes.size() - 8)) {
    return failure("CRC mismatch");
  }
  size_t pos = 0;
  uint64_t magic = 0;
  uint32_t version = 0, count = 0;
  get(bytes, pos, &magic);
  get(bytes, pos, &version);
  get(bytes, pos, &count);
  get(bytes, pos, &out.seq_high);
  if (magic != kCursorMagic || version != kCursorVersion) {
    return failure("bad magic or unsupported version");
  }
  const size_t end = bytes.size() - 8;
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t vl, ql;
    CursorEntry e;
    if (!get(bytes, pos, &vl) || !get(bytes, pos, &ql) || !get(bytes, pos, &e.delivered_seq) ||
        end - pos < size_t(vl) + ql) {
      return failure("entry " + std::to_string(i) + " truncated");
    }
    e.vhost.assign(bytes.data() + pos, vl);
    e.queue.assign(bytes.data() + pos + vl, ql);
    pos += size_t(vl) + ql;
    out.entries.push_back(std::move(e));
  }
  if (pos != end) {
    return failure("trailing bytes");
  }
  return out;
}

Result<> write_cursor_file(const std::string& dir, const CursorSnapshot& s) {
  const std::string path = dir + "/" + kCursorFileName;
  const std::string tmp = path + ".tmp";
  const std::string body = encode_cursors(s);
  base::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd.valid()) return failure(errno_text("cannot create", tmp));
  size_t done = 0;
  while (done < body.size()) {
    const ssize_t r = ::write(fd.get(), body.data() + done, body.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::string e = errno_text("cannot write", tmp);
      fd.reset();
      ::unlink(tmp.c_str());
      return failure(std::move(e));
    }
    done += size_t(r);
  }
  if (::fdatasync(fd.get()) != 0) {
    std::string e = errno_text("cannot sync", tmp);
    fd.reset();
    ::unlink(tmp.c_str());
    return failure(std::move(e));
  }
  fd.reset();  // synced: close's result adds nothing
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string e = errno_text("cannot replace", path);
    ::unlink(tmp.c_str());
    return failure(std::move(e));
  }
  // The rename is durable only once the directory is.
  const base::Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return failure(errno_text("cannot open directory", dir));
  if (::fsync(dfd.get()) != 0) return failure(errno_text("cannot sync directory", dir));
  return {};
}

Result<CursorSnapshot> read_cursor_file(const std::string& dir) {
  const std::string path = dir + "/" + kCursorFileName;
  base::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return CursorSnapshot{};
    return failure(errno_text("cannot open", path));
  }
  std::string bytes;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return failure(errno_text("cannot read", path));
    if (r == 0) break;
    bytes.append(buf, size_t(r));
  }
  fd.reset();
  Result<CursorSnapshot> decoded = decode_cursors(bytes);
  if (!decoded) {
    return failure(path + " is damaged (" + decoded.error().message +
                   "); move it aside to start (undelivered messages already delivered may then "
                   "be delivered again)");
  }
  return decoded;
}

}  // namespace sluice::queue
