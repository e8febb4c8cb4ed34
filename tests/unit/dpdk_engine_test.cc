// The DPDK engine's lcore at packet level: crafted frames go into its burst function, the frames
// it emits are parsed (checksums verified) and checked. Handshake and cookies, the prelude as a
// TCP endpoint, binding (SYN, replay, greeting), splice mode, close and expiry, L2/L3.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/net/checksum.h"
#include "tests/dpdk_sim/sim.h"

namespace {

namespace net = sluice::dpdk::net;
namespace engine = sluice::dpdk::engine;
namespace flow = sluice::dpdk::flow;
namespace session = sluice::session;
using namespace sluice::dpdk::sim;
using engine::detail::FlowState;

flow::Tuple tuple_of(const Endpoint& c) {
  return {c.ip, c.peer_ip, c.tcp_port, c.peer_port};
}

std::vector<Sent> on_port(const std::vector<Sent>& v, uint16_t port) {
  std::vector<Sent> out;
  for (const Sent& s : v)
    if (s.port == port) out.push_back(s);
  return out;
}

const Sent& only(const std::vector<Sent>& v) {
  EXPECT_EQ(v.size(), 1u);
  SLUICE_ASSERT(!v.empty());
  return v.front();
}

class Splicer : public ::testing::Test {
 protected:
  explicit Splicer(const engine::LcoreConfig& c = default_config())
      : b_(std::make_unique<Bench>(c)) {
    b_->lcore->add_neighbor(kOwnerIp, kOwnerMac);
    b_->lcore->add_neighbor(kSpillIp, kSpillMac);
  }
  void TearDown() override {
    // Every frame the lcore took or made came back to the pool or went out (and was freed),
    // or is held by a binding flow and freed with the lcore.
    b_->lcore.reset();
    EXPECT_EQ(b_->pool.outstanding(), 0u);
  }

  Bench& b() { return *b_; }

  // SYN, SYN-ACK, ACK. Returns the SYN-ACK.
  Sent handshake(Endpoint& c) {
    const auto out = b().deliver(c.segment(net::kSyn), 0);
    const Sent& sa = only(out);
    EXPECT_TRUE(sa.tcp());
    EXPECT_TRUE(sa.has(net::kSyn) && sa.has(net::kAck));
    EXPECT_EQ(sa.p.ack, c.isn + 1);
    c.snd_nxt = c.isn + 1;
    c.receive(sa);
    Sent copy = sa;
    EXPECT_TRUE(b().deliver(c.segment(net::kAck), 0).empty());
    EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kPrelude);
    return copy;
  }

  // CONNECT; returns the CONNECTED the gateway injected (acknowledged by the client's next
  // segment).
  Sent connect(Endpoint& c) {
    const auto out = b().deliver(c.data(kConnect), 0);
    const Sent& s = only(out);
    EXPECT_EQ(s.p.seq, c.rcv_nxt);
    EXPECT_EQ(s.p.ack, c.snd_nxt);
    EXPECT_EQ(s.payload().rfind("CONNECTED\n", 0), 0u) << s.payload();
    c.receive(s);
    return s;
  }

  // A new bench with `cfg`, the owner's MAC known.
  void rebuild(const engine::LcoreConfig& cfg = default_config()) {
    b_ = std::make_unique<Bench>(cfg);
    b().lcore->add_neighbor(kOwnerIp, kOwnerMac);
  }

  // A new bench with `cfg` and a client taken to its owner SYN, which is returned.
  Sent rebuild_and_bind(const engine::LcoreConfig& cfg, Endpoint* c) {
    rebuild(cfg);
    *c = make_client();
    handshake(*c);
    connect(*c);
    return bind(*c);
  }

  // SEND with a destination; returns the SYN to the owner.
  Sent bind(Endpoint& c, const std::string& frame = kSendQ1) {
    const auto out = b().deliver(c.data(frame), 0);
    const auto to_owner = on_port(out, 1);
    const auto to_client = on_port(out, 0);
    EXPECT_EQ(to_client.size(), 1u);  // the ACK of the SEND
    if (!to_client.empty()) {
      EXPECT_EQ(to_client[0].p.ack, c.snd_nxt);
      EXPECT_EQ(to_client[0].p.payload_bytes, 0u);
    }
    const Sent& syn = only(to_owner);
    EXPECT_TRUE(syn.has(net::kSyn) && !syn.has(net::kAck));
    EXPECT_EQ(syn.p.seq, c.isn);  // the owner leg starts at the client's ISN
    return syn;
  }

  // The owner's SYN-ACK; returns the replay segments.
  std::vector<Sent> accept(Endpoint& o) {
    const auto out = b().deliver(o.segment(net::kSyn | net::kAck), 1);
    o.snd_nxt = o.isn + 1;
    return on_port(out, 1);
  }

  // The whole path to splice mode; returns the owner endpoint.
  Endpoint splice(Endpoint& c) {
    handshake(c);
    connect(c);
    const Sent syn = bind(c);
    Endpoint o = make_owner(syn);
    const auto replay = accept(o);
    std::string bytes;
    for (const Sent& s : replay) {
      bytes += s.payload();
      o.receive(s);
    }
    replayed_ = bytes;
    // The owner acknowledges the replay and sends CONNECTED; the client already acknowledged
    // ours (its SEND carried the ACK): splice.
    const auto out = b().deliver(o.data(kOwnerConnected), 1);
    const Sent& ack = only(out);
    EXPECT_EQ(ack.port, 1);
    EXPECT_EQ(ack.p.ack, o.snd_nxt);
    EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
    return o;
  }

  std::unique_ptr<Bench> b_;
  std::string replayed_;
};

// ---- L2 / L3 -----------------------------------------------------------------------------

std::vector<uint8_t> arp_request(uint32_t target, uint32_t sender = kClientIp) {
  std::vector<uint8_t> f(42, 0);
  std::fill(f.begin(), f.begin() + 6, 0xff);
  std::copy(kClientMac.bytes.begin(), kClientMac.bytes.end(), f.begin() + 6);
  f[12] = 0x08;
  f[13] = 0x06;
  const uint8_t arp[] = {0, 1, 8, 0, 6, 4, 0, 1};
  std::copy(std::begin(arp), std::end(arp), f.begin() + 14);
  std::copy(kClientMac.bytes.begin(), kClientMac.bytes.end(), f.begin() + 22);
  for (int i = 0; i < 4; ++i)
    f[28 + i] = uint8_t(sender >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i)
    f[38 + i] = uint8_t(target >> (24 - 8 * i));
  return f;
}

TEST_F(Splicer, ArpRequestsForTheVirtualAndLocalAddressesAreAnswered) {
  for (uint32_t ip : {kVip, kLocalIp}) {
    const auto out = b().deliver(arp_request(ip), 0);
    const Sent& r = only(out);
    ASSERT_EQ(r.parsed, net::Reason::kOk);
    EXPECT_EQ(r.p.kind, net::Kind::kArp);
    EXPECT_EQ(r.p.arp.operation, net::kArpReply);
    EXPECT_EQ(r.p.arp.sender_ip, ip);
    EXPECT_EQ(r.p.arp.sender_mac, kPort0Mac);
    EXPECT_EQ(r.p.dst_mac, kClientMac);
  }
  EXPECT_EQ(b().lcore->counters().arp_replies, 2u);
}

TEST_F(Splicer, ArpForAnotherHostIsNotAnsweredWithoutAnExceptionPort) {
  EXPECT_TRUE(b().deliver(arp_request(ip4(10, 0, 0, 99)), 0).empty());
  EXPECT_EQ(b().lcore->counters().rx_not_handled, 1u);
}

TEST_F(Splicer, IcmpEchoToTheVirtualAddressIsAnswered) {
  std::vector<uint8_t> f(14 + 20 + 8 + 4, 0);
  std::copy(kPort0Mac.bytes.begin(), kPort0Mac.bytes.end(), f.begin());
  std::copy(kClientMac.bytes.begin(), kClientMac.bytes.end(), f.begin() + 6);
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  ip[3] = 32;
  ip[8] = 64;
  ip[9] = 1;
  for (int i = 0; i < 4; ++i)
    ip[12 + i] = uint8_t(kClientIp >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i)
    ip[16 + i] = uint8_t(kVip >> (24 - 8 * i));
  const uint16_t ipc = net::internet_checksum(std::span<const uint8_t>(ip, 20));
  ip[10] = uint8_t(ipc >> 8);
  ip[11] = uint8_t(ipc);
  uint8_t* icmp = ip + 20;
  icmp[0] = 8;
  icmp[5] = 1;
  icmp[7] = 1;
  const uint16_t c = net::internet_checksum(std::span<const uint8_t>(icmp, 12));
  icmp[2] = uint8_t(c >> 8);
  icmp[3] = uint8_t(c);
  const auto out = b().deliver(f, 0);
  const Sent& r = only(out);
  ASSERT_EQ(r.parsed, net::Reason::kOk);
  EXPECT_EQ(r.p.kind, net::Kind::kIcmpOther);
  EXPECT_EQ(r.p.icmp_type, 0);
  EXPECT_EQ(r.p.dst_ip, kClientIp);
  EXPECT_EQ(r.p.src_ip, kVip);
}

TEST_F(Splicer, TruncatedAndCorruptFramesAreCountedAndDropped) {
  Endpoint c = make_client();
  auto syn = c.segment(net::kSyn);
  auto truncated = syn;
  truncated.resize(30);
  EXPECT_TRUE(b().deliver(truncated, 0).empty());
  EXPECT_EQ(b().lcore->counters().rx_invalid[size_t(net::Reason::kTruncated)], 1u);

  auto bad_ip = syn;
  bad_ip[14 + 10] ^= 0x40;  // IPv4 header checksum
  EXPECT_TRUE(b().deliver(bad_ip, 0).empty());
  EXPECT_EQ(b().lcore->counters().rx_invalid[size_t(net::Reason::kBadIpChecksum)], 1u);

  auto bad_tcp = syn;
  bad_tcp[14 + 20 + 16] ^= 0x01;  // TCP checksum
  EXPECT_TRUE(b().deliver(bad_tcp, 0).empty());
  EXPECT_EQ(b().lcore->counters().bad_tcp_checksum, 1u);

  auto fragment = syn;
  fragment[14 + 6] |= 0x20;  // MF
  EXPECT_TRUE(b().deliver(fragment, 0).empty());
  EXPECT_EQ(b().lcore->counters().rx_invalid[size_t(net::Reason::kBadIpChecksum)] +
                b().lcore->counters().rx_invalid[size_t(net::Reason::kFragment)],
            2u);
  EXPECT_EQ(b().lcore->flows(), 0u);
}

// ---- handshake -----------------------------------------------------------------------------

TEST_F(Splicer, SynGetsACookieSynAckWithTheNegotiatedOptions) {
  Endpoint c = make_client();
  const auto out = b().deliver(c.segment(net::kSyn), 0);
  const Sent& sa = only(out);
  ASSERT_TRUE(sa.tcp());
  EXPECT_EQ(sa.p.src_ip, kVip);
  EXPECT_EQ(sa.p.dst_ip, kClientIp);
  EXPECT_EQ(sa.p.dst_port, c.tcp_port);
  EXPECT_EQ(sa.p.ack, c.isn + 1);
  EXPECT_TRUE(sa.p.options.has_mss);
  EXPECT_EQ(sa.p.options.mss, 1460);
  EXPECT_TRUE(sa.p.options.has_window_scale);
  EXPECT_EQ(sa.p.options.window_scale, b().config.window_scale);
  EXPECT_TRUE(sa.p.options.sack_permitted);
  EXPECT_TRUE(sa.p.options.has_timestamps);
  EXPECT_EQ(sa.p.options.timestamps.echo_reply, c.ts_value);
  // Stateless: no flow until the cookie comes back.
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, SynWithoutOptionsGetsNoneBack) {
  Endpoint c = make_client();
  c.wscale.reset();
  c.sack = false;
  c.timestamps = false;
  const auto out = b().deliver(c.segment(net::kSyn), 0);
  const Sent& sa = only(out);
  EXPECT_FALSE(sa.p.options.has_window_scale);
  EXPECT_FALSE(sa.p.options.sack_permitted);
  EXPECT_FALSE(sa.p.options.has_timestamps);
}

TEST_F(Splicer, ValidCookieOpensAFlowAndABadOneIsReset) {
  Endpoint c = make_client();
  handshake(c);
  EXPECT_EQ(b().lcore->flows(), 1u);

  Endpoint forger = make_client(40001);
  forger.snd_nxt = forger.isn + 1;
  forger.rcv_nxt = 0x12345678;  // a guessed cookie
  const auto out = b().deliver(forger.segment(net::kAck), 0);
  const Sent& rst = only(out);
  EXPECT_TRUE(rst.has(net::kRst));
  EXPECT_EQ(rst.p.seq, 0x12345678u);
  EXPECT_EQ(b().lcore->counters().cookies_bad, 1u);
  EXPECT_EQ(b().lcore->flows(), 1u);
}

TEST_F(Splicer, CookieExpiresAfterTwoSlots) {
  Endpoint c = make_client();
  const auto out = b().deliver(c.segment(net::kSyn), 0);
  c.receive(only(out));
  c.snd_nxt = c.isn + 1;
  b().now_ns += 200'000'000'000ull;  // 200 s: past the current and the previous 64 s slot
  const auto late = b().deliver(c.segment(net::kAck), 0);
  EXPECT_TRUE(only(late).has(net::kRst));
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, CookieFromTheSameTupleWithAnotherIsnIsRefused) {
  Endpoint c = make_client();
  const auto out = b().deliver(c.segment(net::kSyn), 0);
  c.receive(only(out));
  c.snd_nxt = c.isn + 2;  // claims another ISN
  EXPECT_TRUE(only(b().deliver(c.segment(net::kAck), 0)).has(net::kRst));
}

TEST_F(Splicer, FlowLimitResetsTheNextClient) {
  auto cfg = default_config();
  cfg.prelude_flows_max = 1;
  b_ = std::make_unique<Bench>(cfg);
  Endpoint c1 = make_client(40000);
  handshake(c1);
  Endpoint c2 = make_client(40001);
  const auto out = b().deliver(c2.segment(net::kSyn), 0);
  c2.receive(only(out));
  c2.snd_nxt = c2.isn + 1;
  EXPECT_TRUE(only(b().deliver(c2.segment(net::kAck), 0)).has(net::kRst));
  EXPECT_EQ(b().lcore->counters().flows_refused, 1u);
}

TEST_F(Splicer, DataInTheCookieAckIsTakenAsPrelude) {
  Endpoint c = make_client();
  const auto out = b().deliver(c.segment(net::kSyn), 0);
  c.receive(only(out));
  c.snd_nxt = c.isn + 1;
  const auto reply = b().deliver(c.data(kConnect), 0);
  EXPECT_EQ(only(reply).payload().rfind("CONNECTED", 0), 0u);
}

// ---- prelude as a TCP endpoint ---------------------------------------------------------------

TEST_F(Splicer, PreludeAcceptsConnectInPiecesAndRepliesConnected) {
  Endpoint c = make_client();
  handshake(c);
  const std::string a = kConnect.substr(0, 10);
  const std::string rest = kConnect.substr(10);
  const auto ack = b().deliver(c.data(a), 0);
  EXPECT_EQ(only(ack).p.ack, c.snd_nxt);
  EXPECT_EQ(only(ack).p.payload_bytes, 0u);
  const auto reply = b().deliver(c.data(rest), 0);
  const Sent& s = only(reply);
  EXPECT_EQ(s.payload().rfind("CONNECTED\nversion:1.2\n", 0), 0u) << s.payload();
  EXPECT_NE(s.payload().find("heart-beat:0,0"), std::string::npos);
  EXPECT_EQ(s.p.ack, c.snd_nxt);
}

TEST_F(Splicer, PreludeOutOfOrderSegmentIsDroppedWithADuplicateAck) {
  Endpoint c = make_client();
  handshake(c);
  const uint32_t start = c.snd_nxt;
  const std::string a = kConnect.substr(0, 10);
  const std::string rest = kConnect.substr(10);
  // The second piece first: dropped, the ACK still names the first byte.
  const auto dup = b().deliver(c.segment(net::kAck | net::kPsh, rest, start + 10), 0);
  EXPECT_EQ(only(dup).p.ack, start);
  EXPECT_EQ(b().lcore->counters().out_of_order, 1u);
  // Then in order.
  EXPECT_EQ(only(b().deliver(c.data(a), 0)).p.ack, start + 10);
  EXPECT_EQ(only(b().deliver(c.data(rest), 0)).payload().rfind("CONNECTED", 0), 0u);
}

TEST_F(Splicer, PreludeDuplicateIsReacknowledgedAndNotFedTwice) {
  Endpoint c = make_client();
  handshake(c);
  const uint32_t start = c.snd_nxt;
  const auto reply = b().deliver(c.data(kConnect), 0);
  c.receive(only(reply));
  // The same CONNECT again (the client did not see our ACK): one ACK, no second CONNECTED.
  const auto again = b().deliver(c.segment(net::kAck | net::kPsh, kConnect, start), 0);
  const Sent& s = only(again);
  EXPECT_EQ(s.p.payload_bytes, 0u);
  EXPECT_EQ(s.p.ack, c.snd_nxt);
  EXPECT_EQ(b().lcore->counters().duplicates, 1u);
  // Overlapping: the old bytes and a new one; only the new one is fed.
  const std::string send = kSendQ1;
  const auto overlap = b().deliver(
      c.segment(net::kAck | net::kPsh, kConnect.substr(5) + send.substr(0, 1), start + 5), 0);
  EXPECT_EQ(only(overlap).p.ack, c.snd_nxt + 1);
}

TEST_F(Splicer, InjectedConnectedIsRetransmittedUntilAcknowledged) {
  Endpoint c = make_client();
  handshake(c);
  const Sent first = connect(c);
  // No ACK from the client: the same bytes again after the RTO, then backing off.
  auto rtx = b().advance_ms(b().config.rto_initial_ms + 1);
  ASSERT_EQ(rtx.size(), 1u);
  EXPECT_EQ(rtx[0].p.seq, first.p.seq);
  EXPECT_EQ(rtx[0].payload(), first.payload());
  EXPECT_TRUE(b().advance_ms(b().config.rto_initial_ms).empty());  // doubled
  EXPECT_EQ(b().advance_ms(b().config.rto_initial_ms + 1).size(), 1u);
  // Acknowledged: quiet.
  b().deliver(c.segment(net::kAck), 0);
  EXPECT_TRUE(b().advance_ms(5000).empty());
  EXPECT_EQ(b().lcore->counters().retransmits, 2u);
}

TEST_F(Splicer, InjectedBytesNeverAcknowledgedResetTheFlow) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const auto out = b().advance_ms(30'000);
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().has(net::kRst));
  EXPECT_EQ(b().lcore->counters().retransmit_giveups, 1u);
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, ClientRstInPreludeFreesTheFlowOnlyAtTheExactSequence) {
  Endpoint c = make_client();
  handshake(c);
  // Off by one: a challenge ACK, the flow stays (RFC 5961).
  const auto challenge = b().deliver(c.segment(net::kRst, {}, c.snd_nxt + 1), 0);
  EXPECT_TRUE(only(challenge).has(net::kAck));
  EXPECT_EQ(b().lcore->flows(), 1u);
  EXPECT_TRUE(b().deliver(c.segment(net::kRst), 0).empty());
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, ClientFinInPreludeIsAnsweredWithFinAndTheFlowEnds) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const auto out = b().deliver(c.data("", net::kFin), 0);
  const Sent& fin = only(out);
  EXPECT_TRUE(fin.has(net::kFin));
  EXPECT_EQ(fin.p.ack, c.snd_nxt);
  c.receive(fin);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kClosing);
  EXPECT_TRUE(b().deliver(c.segment(net::kAck), 0).empty());
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, DisconnectInPreludeSendsReceiptThenFin) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const auto out = b().deliver(c.data(stomp_frame("DISCONNECT", {{"receipt", "bye"}})), 0);
  const Sent& r = only(out);
  EXPECT_EQ(r.payload().rfind("RECEIPT\nreceipt-id:bye", 0), 0u) << r.payload();
  EXPECT_TRUE(r.has(net::kFin));
  EXPECT_EQ(b().lcore->counters().prelude_ends[size_t(sluice::session::PreludeEnd::kDisconnect)],
            1u);
  c.receive(r);
  // The client's FIN after it: acknowledged, the flow ends.
  const auto last = b().deliver(c.data("", net::kFin), 0);
  EXPECT_TRUE(only(last).has(net::kAck));
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, BadFirstFrameGetsErrorAndClose) {
  Endpoint c = make_client();
  handshake(c);
  const auto out = b().deliver(c.data(stomp_frame("SEND", {{"destination", "/queue/x"}})), 0);
  const Sent& e = only(out);
  EXPECT_EQ(e.payload().rfind("ERROR\n", 0), 0u);
  EXPECT_TRUE(e.has(net::kFin));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kClosing);
  // Our FIN is retransmitted until acknowledged; the flow ends at fin_timeout at the latest.
  EXPECT_FALSE(b().advance_ms(b().config.rto_initial_ms + 1).empty());
  b().advance_ms(b().config.fin_timeout_ms);
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(Splicer, PreludeFrameTimeoutEndsTheFlowWithError) {
  Endpoint c = make_client();
  handshake(c);
  b().deliver(c.data(kConnect.substr(0, 12)), 0);
  const auto out = b().advance_ms(5'002);  // the wheel fires within one 1 ms tick
  bool error = false;
  for (const Sent& s : out)
    error = error || s.payload().rfind("ERROR\n", 0) == 0;
  EXPECT_TRUE(error);
  EXPECT_EQ(b().lcore->counters().prelude_ends[size_t(sluice::session::PreludeEnd::kFrameTimeout)],
            1u);
}

TEST_F(Splicer, PreludeSendsHeartBeatsAndClosesAClientThatSendsNone) {
  auto cfg = default_config();
  cfg.session.heartbeat_min_ms = 100;
  cfg.session.heartbeat_max_ms = sluice::session::SessionConfig::kHeartBeatMaxMs;
  rebuild(cfg);
  Endpoint c = make_client();
  handshake(c);
  // The client sends every 400 ms and wants a beat every 250 ms.
  const std::string beating =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "400,250"}});
  const auto reply = b().deliver(c.data(beating), 0);
  const Sent& connected = only(reply);
  EXPECT_NE(connected.payload().find("heart-beat:250,400"), std::string::npos)
      << connected.payload();
  c.receive(connected);
  EXPECT_TRUE(b().deliver(c.segment(net::kAck), 0).empty());
  // Beats at 250, 500 and 750 ms; the client acknowledges each (so nothing is sent again).
  std::string got;
  for (int ms = 0; ms < 760; ++ms) {
    for (const Sent& s : b().advance_ms(1)) {
      if (s.p.payload_bytes == 0) continue;
      got += s.payload();
      c.receive(s);
      b().deliver(c.segment(net::kAck), 0);
    }
  }
  EXPECT_EQ(got, "\n\n\n");
  EXPECT_EQ(b().lcore->counters().heartbeats_sent, 3u);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kPrelude);
  // The client said nothing since its CONNECT: closed at twice its interval (800 ms), ERROR
  // first.
  bool error = false;
  for (const Sent& s : b().advance_ms(50))
    error = error || s.payload().find("message:heart-beat timeout") != std::string::npos;
  EXPECT_TRUE(error);
  EXPECT_EQ(
      b().lcore->counters().prelude_ends[size_t(sluice::session::PreludeEnd::kHeartBeatTimeout)],
      1u);
}

TEST_F(Splicer, PlacementIsConfirmedAtTheOwnersConnectedWithinTheSourcesBudget) {
  auto cfg = default_config();
  cfg.placements_per_source_per_minute = 1;
  rebuild(cfg);
  b().router.target.placement_pending = true;
  Endpoint c1 = make_client(40000);
  splice(c1);
  ASSERT_EQ(b().router.confirmed.size(), 1u);
  EXPECT_EQ(b().router.confirmed[0], (std::pair<std::string, uint32_t>{"q1", 7}));
  // A second new queue from the same address within the minute: spliced, not recorded.
  Endpoint c2 = make_client(40001);
  splice(c2);
  EXPECT_EQ(b().router.confirmed.size(), 1u);
  EXPECT_EQ(b().lcore->counters().placements_rate_limited, 1u);
}

// ---- binding ---------------------------------------------------------------------------------

TEST_F(Splicer, OwnerSynCarriesTheClientsIsnAndOptions) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  EXPECT_EQ(b().router.last_queue, "q1");
  EXPECT_EQ(b().router.last_vhost, "/");
  EXPECT_EQ(syn.p.src_ip, kLocalIp);
  EXPECT_EQ(syn.p.dst_ip, kOwnerIp);
  EXPECT_EQ(syn.p.dst_port, kOwnerPort);
  EXPECT_GE(syn.p.src_port, 20000);
  EXPECT_EQ(syn.p.dst_mac, kOwnerMac);
  EXPECT_EQ(syn.p.options.mss, 1460);
  EXPECT_EQ(syn.p.options.window_scale, 7);
  EXPECT_TRUE(syn.p.options.sack_permitted);
  EXPECT_TRUE(syn.p.options.has_timestamps);
  EXPECT_EQ(syn.p.options.timestamps.value, c.ts_value);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
}

// The search for a free local port starts where the config says (sluiced: at random), modulo
// the number of (address, port) pairs.
TEST_F(Splicer, FirstOwnerLegTakesTheLocalPortTheConfigStartsAt) {
  engine::LcoreConfig cfg = default_config();
  const uint32_t per_ip = uint32_t(cfg.local_port_max) - cfg.local_port_min + 1;
  const uint32_t pairs = uint32_t(cfg.local_ips.size()) * per_ip;
  ASSERT_GT(pairs, 3u);
  const uint32_t want = pairs - 3;
  cfg.local_port_start = 5 * pairs + want;  // wraps round
  Endpoint c;
  const Sent syn = rebuild_and_bind(cfg, &c);
  EXPECT_EQ(syn.p.src_ip, cfg.local_ips[want / per_ip]);
  EXPECT_EQ(syn.p.src_port, cfg.local_port_min + want % per_ip);
}

TEST_F(Splicer, ReplayIsTheRewrittenConnectThenTheBufferedBytes) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  const auto replay = accept(o);
  ASSERT_FALSE(replay.empty());
  std::string bytes;
  for (const Sent& s : replay)
    bytes += s.payload();
  EXPECT_EQ(replay[0].p.seq, c.isn + 1);
  EXPECT_EQ(replay[0].p.ack, o.isn + 1);
  const std::string connect_out =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,0"}});
  EXPECT_EQ(bytes, connect_out + kSendQ1);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
}

TEST_F(Splicer, ReplayLostIsRetransmittedAndTheOwnersSynAckRepeatIsAcked) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  b().deliver(c.segment(net::kAck), 0);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  const auto replay = accept(o);
  // The replay is lost; the owner repeats its SYN-ACK: the gateway answers at once.
  const auto again = b().deliver(o.segment(net::kSyn | net::kAck, {}, o.isn), 1);
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].p.ack, o.isn + 1);
  // And the RTO sends the replay again from its first byte.
  const auto rtx = b().advance_ms(b().config.rto_initial_ms + 1);
  ASSERT_FALSE(rtx.empty());
  EXPECT_EQ(rtx[0].p.seq, c.isn + 1);
  EXPECT_EQ(rtx[0].payload(), replay[0].payload());
}

TEST_F(Splicer, OwnerRefusingTheSynSendsTheSessionToSpill) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  o.rcv_nxt = syn.p.seq + 1;
  const auto out = b().deliver(o.segment(net::kRst | net::kAck, {}, 0u), 1);
  ASSERT_EQ(b().router.failed.size(), 1u);
  EXPECT_EQ(b().router.failed[0], 7u);
  const Sent& spill_syn = only(out);
  EXPECT_TRUE(spill_syn.has(net::kSyn));
  EXPECT_EQ(spill_syn.p.dst_ip, kSpillIp);
  EXPECT_EQ(spill_syn.p.dst_port, kSpillPort);
  EXPECT_EQ(spill_syn.p.seq, c.isn);
  EXPECT_EQ(b().lcore->counters().owner_refused, 1u);
  EXPECT_EQ(b().lcore->counters().binds_spill, 1u);
}

TEST_F(Splicer, OwnerSilentIsRetriedThenSpilled) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  bind(c);
  const auto out = b().advance_ms(b().config.connect_timeout_ms + 1);
  size_t owner_syns = 0;
  size_t spill_syns = 0;
  for (const Sent& s : out) {
    if (s.tcp() && s.has(net::kSyn)) ++(s.p.dst_ip == kOwnerIp ? owner_syns : spill_syns);
  }
  EXPECT_EQ(owner_syns, 1u);  // syn_rto_ms = 1000 within connect_timeout_ms = 2000
  EXPECT_EQ(spill_syns, 1u);
  EXPECT_EQ(b().lcore->counters().owner_timeouts, 1u);
  EXPECT_EQ(b().router.failed.size(), 1u);
}

TEST_F(Splicer, SpillRouteConnectsToTheSpillListener) {
  b().router.target = session::Route{session::Route::Kind::kSpill, UINT32_MAX, 0, 0, {}};
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  EXPECT_EQ(syn.p.dst_ip, kSpillIp);
  EXPECT_EQ(syn.p.dst_mac, kSpillMac);
}

TEST_F(Splicer, RefusedRouteGetsErrorWithTheRoutersMessage) {
  b().router.target =
      session::Route{session::Route::Kind::kRefuse, UINT32_MAX, 0, 0, "no node configured"};
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const auto out = b().deliver(c.data(kSendQ1), 0);
  const Sent& e = only(out);
  EXPECT_EQ(e.payload().rfind("ERROR\n", 0), 0u);
  EXPECT_NE(e.payload().find("message:no node configured"), std::string::npos);
  EXPECT_TRUE(e.has(net::kFin));
}

TEST_F(Splicer, UnknownNextHopIsResolvedByArpBeforeTheSyn) {
  b_ = std::make_unique<Bench>();
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const auto out = b().deliver(c.data(kSendQ1), 0);
  const auto to_owner = on_port(out, 1);
  const Sent& req = only(to_owner);
  ASSERT_EQ(req.p.kind, net::Kind::kArp);
  EXPECT_EQ(req.p.arp.operation, net::kArpRequest);
  EXPECT_EQ(req.p.arp.target_ip, kOwnerIp);
  EXPECT_EQ(req.p.dst_mac, net::kBroadcastMac);
  // The owner answers; the next SYN attempt (100 ms) goes out.
  std::vector<uint8_t> reply = arp_request(kLocalIp, kOwnerIp);
  reply[21] = 2;  // operation: reply
  std::copy(kOwnerMac.bytes.begin(), kOwnerMac.bytes.end(), reply.begin() + 6);
  std::copy(kOwnerMac.bytes.begin(), kOwnerMac.bytes.end(), reply.begin() + 22);
  std::copy(kPort1Mac.bytes.begin(), kPort1Mac.bytes.end(), reply.begin());
  EXPECT_TRUE(b().deliver(reply, 1).empty());
  EXPECT_EQ(b().lcore->neighbors(), 1u);
  const auto retry = b().advance_ms(101);
  const auto retry_owner = on_port(retry, 1);
  const Sent& syn = only(retry_owner);
  EXPECT_TRUE(syn.has(net::kSyn));
  EXPECT_EQ(syn.p.dst_mac, kOwnerMac);
}

// Client bytes that arrive while the gateway binds are held in the flow's slot (not
// acknowledged by the gateway) and go to the owner, in order and in its sequence space, the
// moment the flow splices: no wait for the client's retransmission timeout.
TEST_F(Splicer, ClientBytesDuringBindingGoToTheOwnerAtTheSplice) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  const std::string second = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "second");
  const std::string third = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "third");
  EXPECT_TRUE(b().deliver(c.data(second), 0).empty());
  EXPECT_TRUE(b().deliver(c.data(third), 0).empty());
  EXPECT_EQ(b().lcore->counters().binding_parked, 2u);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  const auto out = b().deliver(o.data(kOwnerConnected), 1);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  std::string carried;
  for (const Sent& s : on_port(out, 1)) {
    if (s.p.payload_bytes == 0) continue;
    EXPECT_EQ(s.p.seq, o.rcv_nxt);  // right after the replay, nothing skipped
    carried += s.payload();
    o.receive(s);
  }
  EXPECT_EQ(carried, second + third);
  EXPECT_TRUE(on_port(out, 0).empty());  // the owner's CONNECTED is not the client's
}

// Past the per-flow limit a segment is not held: the client's retransmission brings it.
TEST_F(Splicer, ClientBytesPastTheParkingLimitWaitForTheRetransmission) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  bind(c);
  std::string held;
  for (uint32_t i = 0; i <= engine::Lcore::kParkedPerFlowMax; ++i) {
    const std::string frame =
        stomp_frame("SEND", {{"destination", "/queue/q1"}}, "n" + std::to_string(i));
    EXPECT_TRUE(b().deliver(c.data(frame), 0).empty());
    if (i < engine::Lcore::kParkedPerFlowMax) held += frame;
  }
  EXPECT_EQ(b().lcore->counters().binding_parked, engine::Lcore::kParkedPerFlowMax);
  EXPECT_EQ(b().lcore->counters().binding_park_full, 1u);
  EXPECT_FALSE(held.empty());
}

// The lcore-wide limit: with parked_frames_max 0 nothing is held (the earlier behaviour).
TEST_F(Splicer, NoClientBytesAreHeldWhenTheLcoreLimitIsZero) {
  engine::LcoreConfig cfg = default_config();
  cfg.parked_frames_max = 0;
  Endpoint c;
  const Sent syn = rebuild_and_bind(cfg, &c);
  EXPECT_TRUE(b().deliver(c.data(kSendQ1), 0).empty());
  EXPECT_EQ(b().lcore->counters().binding_parked, 0u);
  EXPECT_EQ(b().lcore->counters().binding_park_full, 1u);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  for (const Sent& s : on_port(b().deliver(o.data(kOwnerConnected), 1), 1))
    EXPECT_EQ(s.p.payload_bytes, 0u);
}

// A flow that ends while binding gives its held segments back to the pool (TearDown checks).
TEST_F(Splicer, HeldClientBytesAreFreedWhenTheBindingFails) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  bind(c);
  EXPECT_TRUE(b().deliver(c.data(kSendQ1), 0).empty());
  EXPECT_EQ(b().lcore->counters().binding_parked, 1u);
  // A RST at what the gateway acknowledged (before the held SEND) resets the flow.
  const auto reset = b().deliver(c.segment(net::kRst, {}, c.snd_nxt - uint32_t(kSendQ1.size())), 0);
  EXPECT_TRUE(only(reset).has(net::kRst));  // to the owner's SYN
  EXPECT_EQ(b().lcore->flows(), 0u);
  EXPECT_EQ(b().pool.outstanding(), 0u);
}

TEST_F(Splicer, OwnerErrorIsForwardedAndBothSidesClose) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  const std::string error = stomp_frame("ERROR", {{"message", "access refused"}}, "denied");
  const auto out = b().deliver(o.data(error), 1);
  const auto to_client = on_port(out, 0);
  const auto to_owner = on_port(out, 1);
  EXPECT_TRUE(only(to_owner).has(net::kRst));
  EXPECT_EQ(only(to_client).payload(), error);
  EXPECT_TRUE(only(to_client).has(net::kFin));
  EXPECT_EQ(b().lcore->counters().owner_errors, 1u);
}

TEST_F(Splicer, OwnerSilentAfterReplayGetsOwnerDidNotAnswer) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  b().deliver(c.segment(net::kAck), 0);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  b().deliver(o.segment(net::kAck), 1);  // replay acknowledged, no CONNECTED
  const auto out = b().advance_ms(b().config.connect_timeout_ms + 1);
  bool error = false;
  for (const Sent& s : on_port(out, 0))
    error = error || s.payload().find("message:owner did not answer") != std::string::npos;
  EXPECT_TRUE(error);
  EXPECT_EQ(b().router.failed.size(), 1u);
}

TEST_F(Splicer, OwnerGreetingInPiecesAndOutOfOrder) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  b().deliver(c.segment(net::kAck), 0);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  const std::string a = kOwnerConnected.substr(0, 8);
  const std::string rest = kOwnerConnected.substr(8);
  // Second piece first: dropped with an ACK of what the gateway has.
  const auto ooo = b().deliver(o.segment(net::kAck | net::kPsh, rest, o.snd_nxt + 8), 1);
  EXPECT_EQ(only(ooo).p.ack, o.isn + 1);
  EXPECT_EQ(only(b().deliver(o.data(a), 1)).p.ack, o.isn + 1 + 8);
  EXPECT_EQ(only(b().deliver(o.data(rest), 1)).p.ack, o.snd_nxt);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
}

// ---- splice mode ---------------------------------------------------------------------------

TEST_F(Splicer, SplicedBytesAreRewrittenAndTranslatedBothWays) {
  Endpoint c = make_client();
  Endpoint o = splice(c);
  const uint32_t removed =
      uint32_t(kConnect.size()) -
      uint32_t(
          stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,0"}})
              .size());
  // Client -> owner.
  const std::string more = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "world");
  const uint32_t client_seq = c.snd_nxt;
  const auto out = b().deliver(c.data(more), 0);
  const Sent& fwd = only(out);
  EXPECT_EQ(fwd.port, 1);
  EXPECT_EQ(fwd.p.src_ip, kLocalIp);
  EXPECT_EQ(fwd.p.dst_ip, kOwnerIp);
  EXPECT_EQ(fwd.p.dst_port, kOwnerPort);
  EXPECT_EQ(fwd.p.dst_mac, kOwnerMac);
  EXPECT_EQ(fwd.p.src_mac, kPort1Mac);
  EXPECT_EQ(fwd.p.seq, client_seq - removed);
  EXPECT_EQ(fwd.p.seq, o.rcv_nxt);
  EXPECT_EQ(fwd.p.ack, o.snd_nxt);  // all of the owner's CONNECTED, though the client saw ours
  EXPECT_EQ(fwd.payload(), more);
  o.receive(fwd);
  // Owner -> client.
  const std::string receipt = stomp_frame("RECEIPT", {{"receipt-id", "r1"}});
  const auto back = b().deliver(o.data(receipt), 1);
  const Sent& r = only(back);
  EXPECT_EQ(r.port, 0);
  EXPECT_EQ(r.p.src_ip, kVip);
  EXPECT_EQ(r.p.src_port, kStompPort);
  EXPECT_EQ(r.p.dst_ip, kClientIp);
  EXPECT_EQ(r.p.dst_port, c.tcp_port);
  EXPECT_EQ(r.p.dst_mac, kClientMac);
  EXPECT_EQ(r.p.seq, c.rcv_nxt);  // right after our CONNECTED
  EXPECT_EQ(r.p.ack, c.snd_nxt);
  EXPECT_EQ(r.payload(), receipt);
  EXPECT_EQ(b().lcore->counters().c2o_bytes, more.size());
  EXPECT_EQ(b().lcore->counters().o2c_bytes, receipt.size());
}

TEST_F(Splicer, WindowsAreRescaledBetweenDifferentScales) {
  Endpoint c = make_client();
  Endpoint o = splice(c);  // client shift 7 (same on the owner leg), owner 9, gateway 7
  o.window = 100;          // 100 << 9 = 51200 bytes
  const auto back = b().deliver(o.data("x"), 1);
  EXPECT_EQ(only(back).p.window, (100u << 9) >> 7);
  c.window = 333;  // the client's shift holds on the owner leg too: unchanged
  const auto fwd = b().deliver(c.data("y"), 0);
  EXPECT_EQ(only(fwd).p.window, 333);
}

TEST_F(Splicer, TimestampsAreOffsetSoTheClientSeesNoStepBack) {
  Endpoint c = make_client();
  Endpoint o = splice(c);
  const auto back = b().deliver(o.data("x"), 1);
  const Sent& r = only(back);
  ASSERT_TRUE(r.p.options.has_timestamps);
  // The gateway's TSvals to the client were its clock in ms; the owner's arrive beyond them.
  EXPECT_GT(r.p.options.timestamps.value, uint32_t(b().now_ns / 1'000'000));
  c.receive(r);
  c.ts_echo = r.p.options.timestamps.value;
  const auto fwd = b().deliver(c.data("y"), 0);
  EXPECT_EQ(only(fwd).p.options.timestamps.echo_reply, o.ts_value);
}

TEST_F(Splicer, SackBlocksAreTranslatedIntoTheOwnersSpace) {
  Endpoint c = make_client();
  Endpoint o = splice(c);
  // The client reports owner->client bytes [rcv_nxt + 100, rcv_nxt + 200) received.
  const net::SackBlock blocks[] = {{c.rcv_nxt + 100, c.rcv_nxt + 200}};
  const auto fwd = b().deliver(c.segment(net::kAck, {}, std::nullopt, blocks), 0);
  const Sent& s = only(fwd);
  ASSERT_EQ(s.p.options.sack_count, 1u);
  EXPECT_EQ(s.p.options.sack[0].left, o.snd_nxt + 100);
  EXPECT_EQ(s.p.options.sack[0].right, o.snd_nxt + 200);
}

TEST_F(Splicer, OwnerRetransmittingItsConnectedIsAnsweredLocally) {
  Endpoint c = make_client();
  Endpoint o = splice(c);
  const auto out = b().deliver(o.segment(net::kAck | net::kPsh, kOwnerConnected, o.isn + 1), 1);
  const Sent& ack = only(out);
  EXPECT_EQ(ack.port, 1);
  EXPECT_EQ(ack.p.ack, o.snd_nxt);
  EXPECT_EQ(b().lcore->counters().removed_range, 1u);
}

TEST_F(Splicer, FinEachWayLingersThenTheFlowIsFreed) {
  Endpoint c = make_client();
  Endpoint o = splice(c);
  const auto f1 = b().deliver(c.data("", net::kFin), 0);
  EXPECT_TRUE(only(f1).has(net::kFin));
  o.receive(only(f1));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);  // half-closed
  const auto f2 = b().deliver(o.data("", net::kFin), 1);
  EXPECT_TRUE(only(f2).has(net::kFin));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kLinger);
  EXPECT_EQ(b().lcore->lingering_flows(), 1u);
  EXPECT_EQ(b().lcore->flows(), 1u);
  c.receive(only(f2));
  // The last ACK still goes through during the linger.
  EXPECT_EQ(b().deliver(c.segment(net::kAck), 0).size(), 1u);
  EXPECT_EQ(b().lcore->lingering_flows(), 1u);
  b().advance_ms(b().config.fin_timeout_ms + 1);
  EXPECT_EQ(b().lcore->flows(), 0u);
  EXPECT_EQ(b().lcore->lingering_flows(), 0u);
  // A straggler after that gets a RST from the local address.
  const auto late = b().deliver(o.segment(net::kAck), 1);
  EXPECT_TRUE(only(late).has(net::kRst));
}

TEST_F(Splicer, ClientSynOnALingeringFlowOpensANewSessionAndIsNotForwarded) {
  for (bool after_rst : {false, true}) {
    rebuild();
    Endpoint c = make_client();
    Endpoint o = splice(c);
    if (after_rst) {
      (void)b().deliver(c.segment(net::kRst | net::kAck), 0);
    } else {
      o.receive(only(b().deliver(c.data("", net::kFin), 0)));
      c.receive(only(b().deliver(o.data("", net::kFin), 1)));
    }
    ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kLinger);
    // A late copy of the flow's own SYN is a straggler: the flow keeps lingering.
    (void)b().deliver(c.segment(net::kSyn, {}, c.isn), 0);
    EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kLinger);
    EXPECT_EQ(b().lcore->counters().flows_reopened, 0u);
    // The client's port comes round again while the flow lingers: the SYN gets a cookie from
    // the gateway (a new session, routed anew); nothing reaches the old owner.
    Endpoint again = make_client(c.tcp_port, c.isn + 0x01000000);
    const auto out = b().deliver(again.segment(net::kSyn), 0);
    const Sent& sa = only(out);
    EXPECT_EQ(sa.port, 0);
    EXPECT_TRUE(sa.has(net::kSyn) && sa.has(net::kAck));
    EXPECT_EQ(sa.p.ack, again.isn + 1);
    EXPECT_EQ(b().lcore->counters().flows_reopened, 1u);
    EXPECT_EQ(b().lcore->lingering_flows(), 0u);
    EXPECT_EQ(b().lcore->flows(), 0u);
    // The new connection goes through the prelude and binds to the owner with its own SYN.
    again.snd_nxt = again.isn + 1;
    again.receive(sa);
    EXPECT_TRUE(b().deliver(again.segment(net::kAck), 0).empty());
    EXPECT_EQ(b().lcore->flow_state(tuple_of(again)), FlowState::kPrelude);
    connect(again);
    const Sent syn = bind(again);
    EXPECT_EQ(syn.p.seq, again.isn);
    // A corrupt SYN does not end a lingering flow.
    Endpoint d = make_client(40002);
    (void)splice(d);
    (void)b().deliver(d.segment(net::kRst | net::kAck), 0);
    auto bad = make_client(40002, d.isn + 5).segment(net::kSyn);
    bad.back() ^= 0xff;
    EXPECT_TRUE(b().deliver(bad, 0).empty());
    EXPECT_EQ(b().lcore->flow_state(tuple_of(d)), FlowState::kLinger);
    EXPECT_EQ(b().lcore->counters().flows_reopened, 1u);
  }
}

TEST_F(Splicer, AFullFlowTableTakesTheLongestLingeringFlowForANewClient) {
  auto cfg = default_config();
  cfg.flows_max = 3;
  cfg.prelude_flows_max = 3;
  rebuild(cfg);
  Endpoint c1 = make_client(40000, 0x10000000);
  Endpoint c2 = make_client(40001, 0x20000000);
  Endpoint c3 = make_client(40002, 0x30000000);
  (void)splice(c1);
  (void)splice(c2);
  (void)splice(c3);
  (void)b().deliver(c2.segment(net::kRst | net::kAck), 0);  // ends first
  (void)b().deliver(c1.segment(net::kRst | net::kAck), 0);
  ASSERT_EQ(b().lcore->lingering_flows(), 2u);
  ASSERT_EQ(b().lcore->flows(), 3u);
  // The table is full; the flow that ended first gives way to a new client.
  Endpoint c4 = make_client(40003, 0x40000000);
  handshake(c4);
  EXPECT_EQ(b().lcore->counters().lingering_evicted, 1u);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c2)), FlowState::kFree);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c1)), FlowState::kLinger);
  EXPECT_EQ(b().lcore->lingering_flows(), 1u);
  Endpoint c5 = make_client(40004, 0x50000000);
  handshake(c5);
  EXPECT_EQ(b().lcore->counters().lingering_evicted, 2u);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c1)), FlowState::kFree);
  EXPECT_EQ(b().lcore->lingering_flows(), 0u);
  // Only live flows now: the next client is refused.
  Endpoint c6 = make_client(40005, 0x60000000);
  const auto out = b().deliver(c6.segment(net::kSyn), 0);
  c6.receive(only(out));
  c6.snd_nxt = c6.isn + 1;
  EXPECT_TRUE(only(b().deliver(c6.segment(net::kAck), 0)).has(net::kRst));
  EXPECT_EQ(b().lcore->counters().flows_refused, 1u);
  EXPECT_EQ(b().lcore->flows(), 3u);
  // The evicted flows' stragglers meet no flow: a reset, as for any segment to a closed port.
  EXPECT_TRUE(only(b().deliver(c1.segment(net::kAck), 0)).has(net::kRst));
}

TEST_F(Splicer, LocalPortsOfLingeringFlowsGoToNewOwnerLegsWhenNoneIsFree) {
  auto cfg = default_config();
  cfg.local_port_min = 20000;
  cfg.local_port_max = 20001;  // two owner legs at once
  rebuild(cfg);
  Endpoint c1 = make_client(40000, 0x10000000);
  Endpoint c2 = make_client(40001, 0x20000000);
  const Endpoint o1 = splice(c1);
  (void)splice(c2);
  (void)b().deliver(c1.segment(net::kRst | net::kAck), 0);
  ASSERT_EQ(b().lcore->lingering_flows(), 1u);
  // Both pairs are taken, one by a lingering flow: the new owner leg gets its port.
  Endpoint c3 = make_client(40002, 0x30000000);
  handshake(c3);
  connect(c3);
  const Sent syn = bind(c3);
  EXPECT_EQ(syn.p.src_port, o1.peer_port);  // c1's local port
  EXPECT_EQ(b().lcore->counters().lingering_evicted, 1u);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c1)), FlowState::kFree);
  EXPECT_EQ(b().lcore->counters().local_ports_exhausted, 0u);
  // With both pairs held by live flows, the next binding is refused with an ERROR.
  Endpoint c4 = make_client(40003, 0x40000000);
  handshake(c4);
  connect(c4);
  const auto out = b().deliver(c4.data(kSendQ1), 0);
  EXPECT_TRUE(on_port(out, 1).empty());
  bool error = false;
  for (const Sent& s : on_port(out, 0))
    error |= s.payload().rfind("ERROR\n", 0) == 0;
  EXPECT_TRUE(error);
  EXPECT_EQ(b().lcore->counters().local_ports_exhausted, 1u);
}

TEST_F(Splicer, RstFromEitherSideIsForwardedAndTheFlowEnds) {
  for (bool from_client : {true, false}) {
    rebuild();
    Endpoint c = make_client();
    Endpoint o = splice(c);
    const auto out = from_client ? b().deliver(c.segment(net::kRst | net::kAck), 0)
                                 : b().deliver(o.segment(net::kRst | net::kAck), 1);
    EXPECT_TRUE(only(out).has(net::kRst));
    EXPECT_EQ(only(out).port, from_client ? 1 : 0);
    EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kLinger);
    EXPECT_EQ(b().lcore->lingering_flows(), 1u);
    // A second RST while it lingers does not count it twice.
    (void)(from_client ? b().deliver(c.segment(net::kRst | net::kAck), 0)
                       : b().deliver(o.segment(net::kRst | net::kAck), 1));
    EXPECT_EQ(b().lcore->lingering_flows(), 1u);
    b().advance_ms(b().config.reset_linger_ms + 1);
    EXPECT_EQ(b().lcore->flows(), 0u);
    EXPECT_EQ(b().lcore->lingering_flows(), 0u);
  }
}

TEST_F(Splicer, IdleSplicedFlowExpires) {
  auto cfg = default_config();
  cfg.established_idle_ms = 10'000;
  rebuild(cfg);
  Endpoint c = make_client();
  splice(c);
  b().advance_ms(6'000);
  b().deliver(c.data("x"), 0);  // activity moves the deadline
  b().advance_ms(6'000);
  EXPECT_EQ(b().lcore->flows(), 1u);
  b().advance_ms(5'000);
  EXPECT_EQ(b().lcore->flows(), 0u);
  EXPECT_EQ(b().lcore->counters().flows_expired, 1u);
}

TEST_F(Splicer, AckStormIsCut) {
  auto cfg = default_config();
  cfg.ack_storm_max = 10;
  rebuild(cfg);
  Endpoint c = make_client();
  splice(c);
  size_t forwarded = 0;
  for (int i = 0; i < 50; ++i)
    forwarded += b().deliver(c.segment(net::kAck), 0).size();
  EXPECT_EQ(forwarded, 11u);  // the first, then ten repeats within the 10 ms window
  EXPECT_EQ(b().lcore->counters().ack_storm_drops, 39u);
}

TEST_F(Splicer, ClientRetransmissionAfterBindingReachesTheOwner) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  b().deliver(c.segment(net::kAck), 0);
  const Sent syn = bind(c);
  // The client pipelines a second SEND while the gateway binds: not acknowledged.
  const std::string second = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "two");
  const uint32_t second_seq = c.snd_nxt;
  EXPECT_TRUE(b().deliver(c.data(second), 0).empty());
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  b().deliver(o.data(kOwnerConnected), 1);
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  // Its retransmission goes straight through, right after the replay in the owner's space.
  const auto fwd = b().deliver(c.segment(net::kAck | net::kPsh, second, second_seq), 0);
  EXPECT_EQ(only(fwd).p.seq, o.rcv_nxt);
  EXPECT_EQ(only(fwd).payload(), second);
}

TEST_F(Splicer, SegmentForNoFlowToALocalAddressIsReset) {
  Endpoint stray = make_client();
  stray.peer_ip = kLocalIp;
  stray.peer_port = 20005;
  stray.snd_nxt = 77;
  stray.rcv_nxt = 99;
  const auto out = b().deliver(stray.segment(net::kAck), 0);
  EXPECT_TRUE(only(out).has(net::kRst));
  EXPECT_EQ(only(out).p.seq, 99u);
}

TEST_F(Splicer, PoolExhaustionIsCountedNotFatal) {
  b().pool.set_limit(1);  // only the received frame itself fits
  Endpoint c = make_client();
  EXPECT_TRUE(b().deliver(c.segment(net::kSyn), 0).empty());
  EXPECT_EQ(b().lcore->counters().pool_empty, 1u);
  b().pool.set_limit(SIZE_MAX);
}

TEST_F(Splicer, ManyClientsEachGetTheirOwnLocalPort) {
  std::set<uint16_t> ports;
  for (uint16_t i = 0; i < 10; ++i) {
    Endpoint c = make_client(uint16_t(41000 + i), 0x20000000u + i * 1000);
    handshake(c);
    connect(c);
    ports.insert(bind(c).p.src_port);
  }
  EXPECT_EQ(ports.size(), 10u);
  EXPECT_EQ(b().lcore->flows(), 10u);
}

}  // namespace

namespace {

// ---- RST and FIN in the binding states, the gateway's own close, the exception path ---------

class SplicerStates : public Splicer {
 protected:
  // The flow in kConnecting (owner SYN sent) and the SYN.
  Sent to_connecting(Endpoint& c) {
    handshake(c);
    connect(c);
    return bind(c);
  }
  // The flow in kReplay (replay sent, no CONNECTED yet).
  Endpoint to_replay(Endpoint& c) {
    const Sent syn = to_connecting(c);
    Endpoint o = make_owner(syn);
    for (const Sent& s : accept(o))
      o.receive(s);
    return o;
  }
};

TEST_F(SplicerStates, ClientRstWhileConnectingResetsTheOwnerLegAndFreesTheFlow) {
  Endpoint c = make_client();
  to_connecting(c);
  const auto out = b().deliver(c.segment(net::kRst, {}, c.snd_nxt - uint32_t(kSendQ1.size())), 0);
  // Off the exact sequence: a challenge ACK only.
  EXPECT_EQ(b().lcore->flows(), 1u);
  (void)out;
  // The client's RST at rcv_nxt (what the gateway acknowledged): the owner's SYN is reset.
  const auto reset = b().deliver(c.segment(net::kRst), 0);
  const Sent& r = only(reset);
  EXPECT_EQ(r.port, 1);
  EXPECT_TRUE(r.has(net::kRst));
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(SplicerStates, ClientRstDuringReplayResetsTheOwner) {
  Endpoint c = make_client();
  to_replay(c);
  const auto out = b().deliver(c.segment(net::kRst), 0);
  EXPECT_TRUE(only(out).has(net::kRst));
  EXPECT_EQ(only(out).port, 1);
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(SplicerStates, ClientFinWhileBindingWaitsForTheSplice) {
  Endpoint c = make_client();
  Endpoint o = to_replay(c);
  // Held, nothing sent; it reaches the owner when the flow splices.
  EXPECT_TRUE(b().deliver(c.segment(net::kAck | net::kFin), 0).empty());
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
  const auto out = b().deliver(o.data(kOwnerConnected), 1);
  bool fin = false;
  for (const Sent& s : on_port(out, 1))
    fin = fin || s.has(net::kFin);
  EXPECT_TRUE(fin);
}

TEST_F(SplicerStates, OwnerRstDuringReplayGetsTheClientAnError) {
  Endpoint c = make_client();
  Endpoint o = to_replay(c);
  const auto out = b().deliver(o.segment(net::kRst | net::kAck), 1);
  const Sent& e = only(out);
  EXPECT_EQ(e.port, 0);
  EXPECT_NE(e.payload().find("message:owner closed the connection"), std::string::npos);
  EXPECT_TRUE(e.has(net::kFin));
  EXPECT_EQ(b().lcore->counters().owner_errors, 1u);
}

TEST_F(SplicerStates, OwnerFinBeforeItsConnectedClosesBothSides) {
  Endpoint c = make_client();
  Endpoint o = to_replay(c);
  const auto out = b().deliver(o.segment(net::kAck | net::kFin), 1);
  const auto to_client = on_port(out, 0);
  const auto to_owner = on_port(out, 1);
  EXPECT_TRUE(only(to_owner).has(net::kRst));
  EXPECT_NE(only(to_client).payload().find("owner closed the connection"), std::string::npos);
}

TEST_F(SplicerStates, OwnerRstOutsideItsWindowIsIgnored) {
  Endpoint c = make_client();
  Endpoint o = to_replay(c);
  EXPECT_TRUE(b().deliver(o.segment(net::kRst, {}, o.snd_nxt + 5000), 1).empty());
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
}

TEST_F(SplicerStates, SynAckThatAcksSomethingElseIsResetAndTheSynGoesOn) {
  Endpoint c = make_client();
  const Sent syn = to_connecting(c);
  Endpoint o = make_owner(syn);
  // Acknowledges a sequence the SYN did not have: a SYN-ACK gone astray, or the ACK a TIME_WAIT
  // of an earlier connection on this port answers a SYN with. RFC 793: a reset <SEQ=SEG.ACK>,
  // and the connection attempt goes on; the first time, with the SYN again at once behind it.
  auto is_reset = [&](const Sent& rst) {
    EXPECT_EQ(rst.port, 1);
    EXPECT_TRUE(rst.has(net::kRst) && !rst.has(net::kAck));
    EXPECT_EQ(rst.p.seq, syn.p.seq + 7);
    EXPECT_EQ(rst.p.src_port, syn.p.src_port);
  };
  o.rcv_nxt = syn.p.seq + 7;
  const auto first = b().deliver(o.segment(net::kSyn | net::kAck), 1);
  ASSERT_EQ(first.size(), 2u);
  is_reset(first[0]);
  EXPECT_EQ(first[1].port, 1);
  EXPECT_TRUE(first[1].has(net::kSyn) && !first[1].has(net::kAck) && !first[1].has(net::kRst));
  EXPECT_EQ(first[1].p.seq, syn.p.seq);
  EXPECT_EQ(first[1].p.src_port, syn.p.src_port);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
  // Again in the same attempt: the RST only, the SYN keeps to its timer.
  is_reset(only(b().deliver(o.segment(net::kAck), 1)));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
  // A RST that acknowledges something else is dropped without an answer.
  EXPECT_TRUE(b().deliver(o.segment(net::kRst | net::kAck), 1).empty());
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
  // The SYN is sent again at its timeout, the same as before.
  const auto again = on_port(b().advance_ms(b().config.syn_rto_ms + 1), 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].has(net::kSyn) && !again[0].has(net::kAck));
  EXPECT_EQ(again[0].p.seq, syn.p.seq);
}

TEST_F(SplicerStates, RstWhileClosingFreesTheFlow) {
  Endpoint c = make_client();
  handshake(c);
  const auto err = b().deliver(c.data(stomp_frame("SEND", {{"destination", "/queue/x"}})), 0);
  c.receive(only(err));
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kClosing);
  EXPECT_TRUE(b().deliver(c.segment(net::kRst), 0).empty());
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(SplicerStates, DataAfterTheGatewaysCloseIsReset) {
  Endpoint c = make_client();
  handshake(c);
  const auto err = b().deliver(c.data(stomp_frame("SEND", {{"destination", "/queue/x"}})), 0);
  c.receive(only(err));
  const auto out = b().deliver(c.data("more"), 0);
  EXPECT_TRUE(only(out).has(net::kRst));
  EXPECT_EQ(b().lcore->flows(), 0u);
}

TEST_F(SplicerStates, LostOwnerSynAckLeadsToASynRetransmission) {
  Endpoint c = make_client();
  const Sent syn = to_connecting(c);
  const auto out = b().advance_ms(b().config.syn_rto_ms + 1);
  const auto to_owner = on_port(out, 1);
  const Sent& again = only(to_owner);
  EXPECT_TRUE(again.has(net::kSyn));
  EXPECT_EQ(again.p.seq, syn.p.seq);
  EXPECT_EQ(again.p.src_port, syn.p.src_port);
}

TEST_F(SplicerStates, LostSegmentsInSpliceModeAreTheEndpointsBusiness) {
  // Splice mode keeps no send state: a retransmitted segment is rewritten like the first.
  Endpoint c = make_client();
  Endpoint o = splice(c);
  const uint32_t seq = c.snd_nxt;
  const auto first = b().deliver(c.data("abc"), 0);
  const auto again = b().deliver(c.segment(net::kAck | net::kPsh, "abc", seq), 0);
  EXPECT_EQ(only(first).p.seq, only(again).p.seq);
  EXPECT_EQ(only(first).payload(), only(again).payload());
  (void)o;
}

// ---- the login check (login_check eager) ----------------------------------------------------

engine::LcoreConfig eager_config() {
  engine::LcoreConfig c = default_config();
  c.session.login_check = sluice::session::LoginCheck::kEager;
  return c;
}

constexpr uint32_t kOtherOwnerIp = ip4(10, 0, 2, 11);
const net::MacAddr kOtherOwnerMac{{0x02, 0, 0, 0, 2, 0x0b}};

class EagerLogin : public Splicer {
 protected:
  EagerLogin() : Splicer(eager_config()) {
    b().lcore->add_neighbor(kOtherOwnerIp, kOtherOwnerMac);
    b().router.login_nodes = {b().router.target};
  }

  // The client's CONNECT (`frame`): the gateway acknowledges it and sends the login node its
  // SYN, which is returned.
  Sent connect_eager(Endpoint& c, const std::string& frame = kConnect) {
    const auto out = b().deliver(c.data(frame), 0);
    const Sent ack = only(on_port(out, 0));
    EXPECT_EQ(ack.p.payload_bytes, 0u);
    EXPECT_EQ(ack.p.ack, c.snd_nxt);
    Sent syn = only(on_port(out, 1));
    EXPECT_TRUE(syn.has(net::kSyn) && !syn.has(net::kAck));
    EXPECT_EQ(syn.p.seq, c.isn);
    EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kPrelude);
    return syn;
  }

  // The node's SYN-ACK: the gateway sends it the rewritten CONNECT, which is returned.
  std::string accept_login(Endpoint& o) {
    std::string bytes;
    for (const Sent& s : accept(o)) {
      bytes += s.payload();
      o.receive(s);
    }
    return bytes;
  }

  // The node answers `answer`: returns what the client was sent.
  std::vector<Sent> answer(Endpoint& o, const std::string& answer) {
    const auto out = b().deliver(o.data(answer), 1);
    for (const Sent& s : on_port(out, 1))
      o.receive(s);
    return on_port(out, 0);
  }

  // The whole check with the node accepting: returns the node.
  Endpoint accepted(Endpoint& c, const std::string& connected = kNodeConnected,
                    const std::string& frame = kConnect) {
    handshake(c);
    const Sent syn = connect_eager(c, frame);
    Endpoint o = make_owner(syn);
    accept_login(o);
    const auto out = b().deliver(o.data(connected), 1);
    const Sent s = only(on_port(out, 0));
    EXPECT_EQ(s.payload(), connected);
    c.receive(s);
    const Sent ack = only(on_port(out, 1));  // the node's CONNECTED is acknowledged
    EXPECT_EQ(ack.p.ack, o.snd_nxt);
    EXPECT_EQ(ack.p.payload_bytes, 0u);
    EXPECT_TRUE(b().deliver(c.segment(net::kAck), 0).empty());
    return o;
  }

  static inline const std::string kNodeConnected =
      stomp_frame("CONNECTED", {{"server", "RabbitMQ/3.10.8"},
                                {"session", "session-Kb3wXtT1"},
                                {"heart-beat", "0,0"},
                                {"version", "1.2"}});
  static inline const std::string kConnectOut =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,0"}});
};

TEST_F(EagerLogin, TheClientGetsTheNodesConnectedAndTheOwnerKeepsItsConnection) {
  b().router.target.placement_pending = true;
  Endpoint c = make_client();
  handshake(c);
  const Sent syn = connect_eager(c);
  EXPECT_EQ(syn.p.dst_ip, kOwnerIp);
  Endpoint o = make_owner(syn);
  EXPECT_EQ(accept_login(o), kConnectOut);  // the CONNECT as the owner gets it, nothing more
  EXPECT_TRUE(b().router.confirmed.empty());
  const auto to_client = answer(o, kNodeConnected);
  EXPECT_EQ(only(to_client).payload(), kNodeConnected);  // byte for byte
  c.receive(to_client[0]);
  EXPECT_EQ(b().router.cached_server, "RabbitMQ/3.10.8");
  // The first destination's owner is that node: no second connection, only the SEND goes.
  const auto out = b().deliver(c.data(kSendQ1), 0);
  EXPECT_EQ(on_port(out, 0).size(), 1u);  // the SEND's ACK
  const Sent replay = only(on_port(out, 1));
  EXPECT_FALSE(replay.has(net::kSyn));
  EXPECT_EQ(replay.p.seq, o.rcv_nxt);
  EXPECT_EQ(replay.payload(), kSendQ1);
  o.receive(replay);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
  ASSERT_EQ(b().router.confirmed.size(), 1u);  // the node accepted the login
  // The owner acknowledges it: spliced.
  EXPECT_TRUE(b().deliver(o.segment(net::kAck), 1).empty());
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  const auto& k = b().lcore->counters();
  EXPECT_EQ(k.login_accepted, 1u);
  EXPECT_EQ(k.login_conn_kept, 1u);
  EXPECT_EQ(k.binds_owner, 1u);
  // Both ways the sequence numbers carry on from what each side saw.
  const std::string receipt = stomp_frame("RECEIPT", {{"receipt-id", "r1"}});
  const Sent r = only(b().deliver(o.data(receipt), 1));
  EXPECT_EQ(r.port, 0);
  EXPECT_EQ(r.p.seq, c.rcv_nxt);
  EXPECT_EQ(r.p.ack, c.snd_nxt);
  EXPECT_EQ(r.payload(), receipt);
  c.receive(r);
  const std::string more = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "world");
  const Sent fwd = only(b().deliver(c.data(more), 0));
  EXPECT_EQ(fwd.port, 1);
  EXPECT_EQ(fwd.p.seq, o.rcv_nxt);
  EXPECT_EQ(fwd.p.ack, o.snd_nxt);
  EXPECT_EQ(fwd.payload(), more);
}

TEST_F(EagerLogin, TheNodesErrorReachesTheClientAndNothingIsRecorded) {
  b().router.target.placement_pending = true;
  Endpoint c = make_client();
  handshake(c);
  const std::string connect = stomp_frame(
      "CONNECT",
      {{"accept-version", "1.2"}, {"host", "/"}, {"login", "guest"}, {"passcode", "wrong"}});
  Endpoint o = make_owner(connect_eager(c, connect));
  accept_login(o);
  b().router.cached_passcode = "wrong";  // a stale entry: the refusal empties it
  const std::string error =
      stomp_frame("ERROR", {{"message", "Bad CONNECT"}, {"content-type", "text/plain"}},
                  "Access refused for user 'guest'");
  const auto out = b().deliver(o.data(error), 1);
  EXPECT_TRUE(only(on_port(out, 1)).has(net::kRst));
  const Sent to_client = only(on_port(out, 0));
  EXPECT_EQ(to_client.payload(), error);
  EXPECT_TRUE(to_client.has(net::kFin));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kClosing);
  // The client takes the ERROR and the FIN, then closes too (the window is open for its
  // FIN): the flow ends.
  EXPECT_GT(to_client.p.window, 0u);
  c.receive(to_client);
  b().deliver(c.segment(net::kAck), 0);
  const auto last = b().deliver(c.data({}, net::kFin), 0);
  EXPECT_EQ(only(last).p.ack, c.snd_nxt);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kFree);
  EXPECT_EQ(b().router.routes, 0u);
  EXPECT_TRUE(b().router.confirmed.empty());
  EXPECT_TRUE(b().router.cached_passcode.empty());
  const auto& k = b().lcore->counters();
  EXPECT_EQ(k.login_refused, 1u);
  EXPECT_EQ(k.prelude_ends[size_t(sluice::session::PreludeEnd::kLoginRefused)], 1u);
  ASSERT_EQ(b().router.ends.size(), 1u);
  EXPECT_EQ(b().router.ends[0], "login_refused vhost=/ login=guest queue= message=Bad CONNECT");
}

TEST_F(EagerLogin, ANodeThatCannotCheckIsPassedOverThenTheGatewayAnswers) {
  session::Route other = b().router.target;
  other.node = 8;
  other.ip = kOtherOwnerIp;
  b().router.login_nodes.push_back(other);
  Endpoint c = make_client();
  handshake(c);
  // The first node refuses the connection: the second is asked at once.
  Endpoint o = make_owner(connect_eager(c));
  const auto out = b().deliver(o.segment(net::kRst | net::kAck, {}, 0u), 1);
  const Sent syn = only(out);
  EXPECT_TRUE(syn.has(net::kSyn));
  EXPECT_EQ(syn.p.dst_ip, kOtherOwnerIp);
  // It takes the connection but never answers the CONNECT: after connect_timeout_ms, no node
  // is left and the gateway answers itself.
  Endpoint o2 = make_owner(syn, 0x71000000, kOtherOwnerIp, kOtherOwnerMac);
  EXPECT_EQ(accept_login(o2), kConnectOut);
  std::string to_client;
  bool reset = false;
  for (const Sent& s : b().advance_ms(b().config.connect_timeout_ms + 1)) {
    if (s.port == 0) to_client += s.payload();
    reset = reset || (s.port == 1 && s.has(net::kRst) && s.p.dst_ip == kOtherOwnerIp);
  }
  EXPECT_TRUE(reset);
  EXPECT_EQ(to_client.rfind("CONNECTED\n", 0), 0u) << to_client;
  EXPECT_NE(to_client.find("session:sluice-"), std::string::npos) << to_client;
  EXPECT_EQ(b().router.failed, (std::vector<uint32_t>{7, 8}));
  const auto& k = b().lcore->counters();
  EXPECT_EQ(k.login_failed, 2u);
  EXPECT_EQ(k.login_unchecked, 1u);
  EXPECT_EQ(b().router.login_asks, 3u);
}

TEST_F(EagerLogin, ACachedLoginIsAnsweredWithoutANode) {
  b().router.cached_passcode = "secret";
  b().router.cached_server = "RabbitMQ/3.10.8";
  Endpoint c = make_client();
  handshake(c);
  const std::string connect = stomp_frame(
      "CONNECT",
      {{"accept-version", "1.2"}, {"host", "/"}, {"login", "guest"}, {"passcode", "secret"}});
  const Sent s = only(b().deliver(c.data(connect), 0));
  EXPECT_EQ(s.payload().rfind("CONNECTED\n", 0), 0u);
  EXPECT_NE(s.payload().find("server:RabbitMQ/3.10.8"), std::string::npos) << s.payload();
  EXPECT_EQ(b().lcore->counters().login_cached, 1u);
  EXPECT_EQ(b().router.login_asks, 0u);
}

TEST_F(EagerLogin, AnotherOwnerGetsAFreshConnectionAndTheHeldOneIsReset) {
  Endpoint c = make_client();
  Endpoint o = accepted(c);
  b().router.target.node = 8;
  b().router.target.ip = kOtherOwnerIp;
  const auto out = b().deliver(c.data(kSendQ1), 0);
  const auto to_owners = on_port(out, 1);
  ASSERT_EQ(to_owners.size(), 2u);
  EXPECT_TRUE(to_owners[0].has(net::kRst));
  EXPECT_EQ(to_owners[0].p.dst_ip, kOwnerIp);
  EXPECT_EQ(to_owners[0].p.seq, o.rcv_nxt);
  EXPECT_TRUE(to_owners[1].has(net::kSyn));
  EXPECT_EQ(to_owners[1].p.dst_ip, kOtherOwnerIp);
  EXPECT_NE(to_owners[1].p.src_port, to_owners[0].p.src_port);
  // The new owner gets the whole replay and its CONNECTED is stripped, as without the check.
  Endpoint o2 = make_owner(to_owners[1], 0x72000000, kOtherOwnerIp, kOtherOwnerMac);
  std::string replay;
  for (const Sent& s : accept(o2)) {
    replay += s.payload();
    o2.receive(s);
  }
  EXPECT_EQ(replay, kConnectOut + kSendQ1);
  EXPECT_TRUE(answer(o2, kOwnerConnected).empty());  // stripped: the client has its CONNECTED
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  const std::string receipt = stomp_frame("RECEIPT", {{"receipt-id", "r1"}});
  const Sent r = only(b().deliver(o2.data(receipt), 1));
  EXPECT_EQ(r.p.seq, c.rcv_nxt);  // right after the first node's CONNECTED
  EXPECT_EQ(r.payload(), receipt);
  EXPECT_EQ(b().lcore->counters().login_conn_closed, 1u);
}

// The client beats every 300 ms (and wants none): the node, which expects them, gets them on
// the held connection, and its own EOLs are absorbed; when the connection is kept, both
// directions' sequence numbers account for them.
TEST_F(EagerLogin, TheHeldConnectionCarriesTheClientsBeatsAndAbsorbsTheNodes) {
  auto cfg = eager_config();
  cfg.session.heartbeat_min_ms = 100;
  cfg.session.heartbeat_max_ms = sluice::session::SessionConfig::kHeartBeatMaxMs;
  rebuild(cfg);
  b().router.login_nodes = {b().router.target};
  Endpoint c = make_client();
  const std::string connect =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "300,0"}});
  const std::string connected =
      stomp_frame("CONNECTED", {{"version", "1.2"}, {"heart-beat", "0,300"}});
  Endpoint o = accepted(c, connected, connect);
  // At 300 ms the node gets an EOL; it acknowledges it and sends two of its own.
  std::string to_owner;
  for (const Sent& s : b().advance_ms(301)) {
    EXPECT_EQ(s.port, 1);
    to_owner += s.payload();
    o.receive(s);
  }
  EXPECT_EQ(to_owner, "\n");
  const Sent ack = only(b().deliver(o.data("\n\n"), 1));
  EXPECT_EQ(ack.port, 1);
  EXPECT_EQ(ack.p.ack, o.snd_nxt);
  EXPECT_EQ(ack.p.payload_bytes, 0u);
  // The client's own EOL in the prelude, then its SEND: the node gets those only.
  b().deliver(c.data("\n"), 0);
  const auto out = b().deliver(c.data(kSendQ1), 0);
  const Sent replay = only(on_port(out, 1));
  EXPECT_EQ(replay.p.seq, o.rcv_nxt);
  EXPECT_EQ(replay.payload(), "\n" + kSendQ1);
  o.receive(replay);
  b().deliver(o.segment(net::kAck), 1);
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  const std::string receipt = stomp_frame("RECEIPT", {{"receipt-id", "r1"}});
  const Sent r = only(b().deliver(o.data(receipt), 1));
  EXPECT_EQ(r.p.seq, c.rcv_nxt);
  EXPECT_EQ(r.p.ack, c.snd_nxt);
  c.receive(r);
  const Sent fwd = only(b().deliver(c.data("\n"), 0));
  EXPECT_EQ(fwd.p.seq, o.rcv_nxt);
  EXPECT_EQ(fwd.p.ack, o.snd_nxt);
  EXPECT_EQ(b().lcore->counters().heartbeats_sent, 1u);
}

TEST_F(EagerLogin, ANodeThatSpeaksWhileHeldLosesTheConnection) {
  Endpoint c = make_client();
  Endpoint o = accepted(c);
  const std::string error = stomp_frame("ERROR", {{"message", "connection_forced"}});
  const auto out = b().deliver(o.data(error), 1);
  EXPECT_TRUE(only(out).has(net::kRst));
  EXPECT_EQ(b().lcore->counters().login_conn_closed, 1u);
  // The session binds afresh, to the same node, with the whole replay.
  const auto bound = b().deliver(c.data(kSendQ1), 0);
  const Sent syn = only(on_port(bound, 1));
  EXPECT_TRUE(syn.has(net::kSyn));
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
}

TEST_F(EagerLogin, ClientResetWhileTheNodeChecksResetsTheNodesConnection) {
  Endpoint c = make_client();
  handshake(c);
  Endpoint o = make_owner(connect_eager(c));
  accept_login(o);
  const auto out = b().deliver(c.segment(net::kRst), 0);
  EXPECT_TRUE(only(out).has(net::kRst));
  EXPECT_EQ(only(out).p.dst_ip, kOwnerIp);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kFree);
}

// The owner's CONNECTED is checked against the heart-beats the client was told: an owner that
// sends less often is counted and the session goes on; one that wants the client's beats more
// often than the client was told would drop it, so the client gets an ERROR now.
TEST_F(Splicer, OwnerHeartBeatsOtherThanTheClientWasToldAreCountedOrRefused) {
  // The client offers 400,400 and is told 500,500 (the least the gateway takes): it beats every
  // 500 ms. An owner answering 100,100 expects it every 400.
  auto cfg = default_config();
  cfg.session.heartbeat_min_ms = 500;
  cfg.session.heartbeat_max_ms = sluice::session::SessionConfig::kHeartBeatMaxMs;
  rebuild(cfg);
  const std::string beating =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "400,400"}});
  for (const auto& [owner_hb, refused] : {std::pair<std::string, bool>{"0,0", false},
                                          std::pair<std::string, bool>{"100,100", true}}) {
    Endpoint c = make_client(refused ? 40001 : 40000);
    handshake(c);
    c.receive(only(b().deliver(c.data(beating), 0)));
    Endpoint o = make_owner(bind(c));
    for (const Sent& s : accept(o))
      o.receive(s);
    const std::string connected =
        stomp_frame("CONNECTED", {{"version", "1.2"}, {"heart-beat", owner_hb}});
    const auto out = b().deliver(o.data(connected), 1);
    const auto to_client = on_port(out, 0);
    if (refused) {
      ASSERT_EQ(to_client.size(), 1u);
      EXPECT_NE(to_client[0].payload().find("ERROR"), std::string::npos);
      EXPECT_TRUE(to_client[0].has(net::kFin));
    } else {
      EXPECT_TRUE(to_client.empty());
    }
  }
  const auto& k = b().lcore->counters();
  EXPECT_EQ(k.heartbeat_mismatch_allowed, 1u);
  EXPECT_EQ(k.heartbeat_mismatch_refused, 1u);
  EXPECT_EQ(b().router.mismatches, (std::vector<sluice::session::HeartBeatCheck>{
                                       sluice::session::HeartBeatCheck::kOwnerSlower,
                                       sluice::session::HeartBeatCheck::kOwnerStricter}));
}

TEST_F(Splicer, TheGatewayBeatsWhileTheOwnerConnects) {
  auto cfg = default_config();
  cfg.session.heartbeat_min_ms = 100;
  cfg.session.heartbeat_max_ms = sluice::session::SessionConfig::kHeartBeatMaxMs;
  cfg.connect_timeout_ms = 1000;
  rebuild(cfg);
  Endpoint c = make_client();
  handshake(c);
  const std::string beating =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,200"}});
  c.receive(only(b().deliver(c.data(beating), 0)));
  bind(c);
  // The owner is silent: beats at 200, 400, 600 and 800 ms, then the spill listener's SYN.
  std::string got;
  for (int ms = 0; ms < 900; ++ms) {
    for (const Sent& s : b().advance_ms(1)) {
      if (s.port != 0 || s.p.payload_bytes == 0) continue;
      got += s.payload();
      c.receive(s);
      b().deliver(c.segment(net::kAck), 0);
    }
  }
  EXPECT_EQ(got, "\n\n\n\n");
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kConnecting);
  EXPECT_EQ(b().lcore->counters().owner_timeouts, 0u);
  // The owner's timeout is still the connect's own.
  b().advance_ms(101);
  EXPECT_EQ(b().lcore->counters().owner_timeouts, 1u);
}

class SplicerWithKernel : public Splicer {
 protected:
  static engine::LcoreConfig with_tap() {
    engine::LcoreConfig c = default_config();
    c.port_macs.push_back(net::MacAddr{{0x02, 0, 0, 0, 0, 0x12}});  // port 2: the TAP
    c.exception_port = 2;
    c.routes.push_back({ip4(10, 0, 3, 0), 24, 0, 2});
    return c;
  }
  SplicerWithKernel() : Splicer(with_tap()) {}
};

TEST_F(SplicerWithKernel, FramesForTheHostGoToTheTapAndTheKernelsLeaveByTheirRoute) {
  // A client's SYN to the host's own address (admin API, SSH): to the kernel, unchanged.
  Endpoint ssh = make_client();
  ssh.peer_ip = ip4(10, 0, 0, 7);
  ssh.peer_port = 22;
  const auto in = b().deliver(ssh.segment(net::kSyn), 0);
  const Sent& up = only(in);
  EXPECT_EQ(up.port, 2);
  EXPECT_EQ(up.p.dst_port, 22);
  EXPECT_EQ(b().lcore->counters().exception_frames, 1u);
  // The kernel's answer to the client leaves by the route to 10.0.1.0/24 with port 0's MAC.
  Endpoint kernel = ssh;
  kernel.mac = net::MacAddr{{0x0a, 0, 0, 0, 0, 0x99}};
  kernel.gw_mac = kClientMac;
  kernel.ip = ip4(10, 0, 0, 7);
  kernel.tcp_port = 22;
  kernel.peer_ip = kClientIp;
  kernel.peer_port = ssh.tcp_port;
  const auto out = b().deliver(kernel.segment(net::kSyn | net::kAck), 2);
  const Sent& down = only(out);
  EXPECT_EQ(down.port, 0);
  EXPECT_EQ(down.p.src_mac, kPort0Mac);
  EXPECT_EQ(down.p.dst_mac, kClientMac);
  // And from then on frames to the host reach the kernel's own MAC.
  const auto in2 = b().deliver(ssh.segment(net::kAck), 0);
  EXPECT_EQ(only(in2).p.dst_mac, kernel.mac);
}

TEST_F(SplicerWithKernel, TheKernelTalksToTheEngineThroughTheTap) {
  // ARP from the kernel for a local address is answered on the TAP port.
  std::vector<uint8_t> req = arp_request(kLocalIp, ip4(10, 0, 3, 1));
  const auto out = b().deliver(req, 2);
  const Sent& r = only(out);
  EXPECT_EQ(r.port, 2);
  EXPECT_EQ(r.p.arp.operation, net::kArpReply);
  EXPECT_EQ(r.p.arp.sender_ip, kLocalIp);
}

}  // namespace

namespace {

TEST_F(SplicerStates, OwnerBytesThatCompleteTheReplayAreForwardedAtOnce) {
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const Sent syn = bind(c);
  Endpoint o = make_owner(syn);
  const auto replay = accept(o);
  // CONNECTED arrives without acknowledging the replay (the owner's delayed ACK) ...
  Endpoint early = o;
  early.rcv_nxt = syn.p.seq + 1;  // acknowledges only the SYN
  b().deliver(early.data(kOwnerConnected), 1);
  o.snd_nxt = early.snd_nxt;
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
  // ... then the RECEIPT, acknowledging the replay: spliced, and the RECEIPT reaches the client.
  for (const Sent& s : replay)
    o.receive(s);
  const std::string receipt = stomp_frame("RECEIPT", {{"receipt-id", "r1"}});
  const auto out = b().deliver(o.data(receipt), 1);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  const auto to_client = on_port(out, 0);
  const Sent& r = only(to_client);
  EXPECT_EQ(r.payload(), receipt);
  EXPECT_EQ(r.p.seq, c.rcv_nxt);
}

}  // namespace

namespace {

TEST_F(SplicerStates, ClientSegmentThatAcknowledgesConnectedLastIsForwarded) {
  // CONNECT and SEND in one segment: the CONNECTED is still unacknowledged when the owner
  // side is ready, so the client's next segment completes the binding and goes through.
  Endpoint c = make_client();
  handshake(c);
  const auto out = b().deliver(c.data(kConnect + kSendQ1), 0);
  const auto to_client = on_port(out, 0);
  const auto to_owner = on_port(out, 1);
  const Sent& connected = only(to_client);
  const Sent& syn = only(to_owner);
  Endpoint o = make_owner(syn);
  for (const Sent& s : accept(o))
    o.receive(s);
  b().deliver(o.data(kOwnerConnected), 1);
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kReplay);
  c.receive(connected);
  const std::string more = stomp_frame("SEND", {{"destination", "/queue/q1"}}, "x");
  const auto fwd = b().deliver(c.data(more), 0);
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  const Sent& f = only(fwd);
  EXPECT_EQ(f.port, 1);
  EXPECT_EQ(f.payload(), more);
  EXPECT_EQ(f.p.seq, o.rcv_nxt);
}

}  // namespace

namespace {

TEST_F(SplicerStates, ReplaySegmentsLeaveRoomForTheTimestampOption) {
  // A replay longer than one segment: every segment fits a 1500-byte IP packet with the 12
  // option bytes, and together they are the whole replay.
  Endpoint c = make_client();
  handshake(c);
  connect(c);
  const std::string big =
      stomp_frame("SEND", {{"destination", "/queue/q1"}}, std::string(3000, 'b'));
  // The SEND's head is in the first segment, so the gateway binds on it: the replay is the
  // CONNECT and those 1400 bytes (the rest comes through the splice).
  const auto out = b().deliver(c.data(big.substr(0, 1400)), 0);
  const auto to_owner = on_port(out, 1);
  const Sent& syn = only(to_owner);
  Endpoint o = make_owner(syn);
  o.window = 65535;
  const auto replay = accept(o);
  ASSERT_EQ(replay.size(), 2u);
  size_t bytes = 0;
  for (const Sent& s : replay) {
    EXPECT_LE(s.p.frame_end - s.p.l3_offset, 1500u);
    EXPECT_LE(s.p.payload_bytes, 1448u);
    EXPECT_TRUE(s.p.options.has_timestamps);
    bytes += s.p.payload_bytes;
  }
  const std::string connect_out =
      stomp_frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,0"}});
  EXPECT_EQ(bytes, connect_out.size() + 1400);
}

// ---- the driver's fast path (Lcore::fast) ---------------------------------------------------

// Lcore::fast over the frames as the driver offers them; returns how many it took and the
// ports it gave them.
std::pair<size_t, std::vector<uint16_t>> offer(engine::Lcore& lcore, uint16_t port,
                                               const std::vector<Frame*>& frames, uint64_t now_ns) {
  std::vector<engine::RxBuffer> buffers(frames.size());
  std::vector<engine::RxBuffer*> views;
  for (size_t i = 0; i < frames.size(); ++i) {
    engine::set_rx_buffer(buffers[i], frames[i]->data, uint16_t(frames[i]->len));
    views.push_back(&buffers[i]);
  }
  std::vector<engine::FastRun> runs(frames.size());
  const size_t count = lcore.fast(port, views, runs.data(), now_ns);
  EXPECT_LE(count, frames.size());
  // The runs as the driver reads them: each one frame at least, the ports of runs next to
  // each other different (a run ends where the port changes).
  std::vector<uint16_t> out;
  for (size_t r = 0; r < count; ++r) {
    EXPECT_GT(runs[r].end, out.size()) << "run " << r << " holds no frame";
    EXPECT_LE(runs[r].end, frames.size());
    if (r != 0) {
      EXPECT_NE(runs[r].port, runs[r - 1].port) << "run " << r;
    }
    out.resize(std::max<size_t>(out.size(), runs[r].end), runs[r].port);
  }
  const size_t n = engine::fast_taken(runs.data(), count);
  EXPECT_EQ(out.size(), n);
  return {n, out};
}

// Each test runs on both builds of the fast path's loop (LcoreConfig::fast_path_v3): the
// baseline, and the x86-64-v3 build where the CPU has it.
engine::LcoreConfig fast_path_config(bool v3) {
  engine::LcoreConfig c = default_config();
  c.fast_path_v3 = v3;
  return c;
}

class FastPath : public Splicer, public ::testing::WithParamInterface<bool> {
 protected:
  FastPath() : Splicer(config()) {}
  // default_config() with this test's build of the loop.
  static engine::LcoreConfig config() { return fast_path_config(GetParam()); }
  // A spliced session whose sequence maps are down to their bases, as the fast path wants
  // them: the owner has acknowledged the replay and the client the injected CONNECTED.
  Endpoint settle(Endpoint& c) {
    Endpoint o = splice(c);
    for (const Sent& s : b().deliver(o.segment(net::kAck), 1))
      c.receive(s);
    for (const Sent& s : b().deliver(c.data("x"), 0))
      o.receive(s);
    return o;
  }
  // Frees what offer() took (a port would after sending it) and hands the rest to burst().
  void finish(const std::vector<Frame*>& frames, size_t taken) {
    for (size_t i = 0; i < taken; ++i)
      b().pool.free(frames[i]);
    std::vector<Frame*> rest(frames.begin() + long(taken), frames.end());
    if (!rest.empty()) b().deliver(rest);
  }
};

TEST_P(FastPath, TakesSegmentsFromTheFrontAndStopsAtTheFirstItLeaves) {
  Endpoint c = make_client();
  Endpoint o = settle(c);
  const engine::LcoreCounters before = b().lcore->counters();
  std::vector<Frame*> frames = {b().pool.frame(c.data("one"), 0),
                                b().pool.frame(c.segment(net::kAck), 0),
                                b().pool.frame(c.data("two", net::kFin), 0),  // FIN: general path
                                b().pool.frame(c.data("three"), 0)};
  const auto [taken, ports] = offer(*b().lcore, 0, frames, b().now_ns);
  EXPECT_EQ(taken, 2u);
  EXPECT_EQ(ports, (std::vector<uint16_t>{1, 1}));
  // The first one is rewritten for the owner leg: the bytes a general-path rewrite would give
  // (its checksums verify and it reads as the owner expects).
  const Sent s = sent_of(frames[0]);
  ASSERT_TRUE(s.tcp());
  EXPECT_EQ(s.p.dst_ip, kOwnerIp);
  EXPECT_EQ(s.p.dst_port, o.tcp_port);
  EXPECT_EQ(s.p.seq, o.rcv_nxt);
  EXPECT_EQ(s.payload(), "one");
  const engine::LcoreCounters& after = b().lcore->counters();
  EXPECT_EQ(after.fast_path - before.fast_path, 2u);
  EXPECT_EQ(after.c2o_packets - before.c2o_packets, 2u);
  EXPECT_EQ(after.c2o_bytes - before.c2o_bytes, 3u);
  finish(frames, taken);
  EXPECT_EQ(b().lcore->counters().fast_path - before.fast_path, 2u);
  EXPECT_EQ(b().lcore->counters().c2o_packets - before.c2o_packets, 4u);
}

TEST_P(FastPath, LeavesWhatTheGeneralPathMustSee) {
  Endpoint c = make_client();
  Endpoint o = settle(c);
  std::vector<uint8_t> bad_ip = c.data("y");
  bad_ip[net::kEthernetBytes + 8] ^= 1;  // TTL: the header checksum no longer verifies
  const net::SackBlock sack[] = {{o.snd_nxt + 10, o.snd_nxt + 20}};
  const std::vector<std::pair<std::vector<uint8_t>, uint16_t>> cases = {
      {bad_ip, 0},
      {c.segment(net::kAck, {}, std::nullopt, sack), 0},  // SACK blocks
      {c.segment(net::kRst | net::kAck), 0},
      {c.data("z"), 1},  // on a port whose MAC it is not addressed to
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Frame* f = b().pool.frame(cases[i].first, cases[i].second);
    EXPECT_EQ(offer(*b().lcore, cases[i].second, {f}, b().now_ns).first, 0u);
    b().pool.free(f);
  }
  // A buffer of two segments (its first one the whole frame, the second one padding: the
  // general path refuses it) and a frame from the exception port.
  Frame* f = b().pool.frame(c.data("w"), 0);
  engine::RxBuffer two;
  engine::set_rx_buffer(two, f->data, uint16_t(f->len), 2);
  engine::RxBuffer* const views[] = {&two};
  engine::FastRun out;
  EXPECT_EQ(b().lcore->fast(0, views, &out, b().now_ns), 0u);
  b().pool.free(f);
  EXPECT_EQ(b().lcore->counters().fast_path, 0u);

  engine::LcoreConfig cfg = config();
  cfg.exception_port = 1;
  rebuild(cfg);
  Endpoint c2 = make_client();
  settle(c2);
  Frame* g = b().pool.frame(c2.data("v"), 1);
  std::memcpy(g->data, kPort1Mac.bytes.data(), 6);
  EXPECT_EQ(offer(*b().lcore, 1, {g}, b().now_ns).first, 0u);
  b().pool.free(g);
  Frame* h = b().pool.frame(c2.data("u"), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {h}, b().now_ns).first, 1u);
  b().pool.free(h);
}

TEST_P(FastPath, RepeatedPureAckGoesToTheAckStormCheck) {
  Endpoint c = make_client();
  settle(c);
  Frame* first = b().pool.frame(c.segment(net::kAck), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {first}, b().now_ns).first, 1u);
  b().pool.free(first);
  Frame* again = b().pool.frame(c.segment(net::kAck), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {again}, b().now_ns).first, 0u);
  finish({again}, 0);
  c.window = uint16_t(c.window + 1);  // a window update is a new ACK
  Frame* update = b().pool.frame(c.segment(net::kAck), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {update}, b().now_ns).first, 1u);
  b().pool.free(update);
}

// A segment the fast path takes ends a run of repeated pure ACKs, as one the general path takes
// does: the ACK-storm count starts again.
TEST_P(FastPath, ASegmentTakenEndsARunOfRepeatedAcks) {
  engine::LcoreConfig cfg = config();
  cfg.ack_storm_max = 3;
  rebuild(cfg);
  Endpoint c = make_client();
  settle(c);
  const auto repeat_acks = [&](int count) {
    for (int i = 0; i < count; ++i) {
      Frame* f = b().pool.frame(c.segment(net::kAck), 0);
      const size_t taken = offer(*b().lcore, 0, {f}, b().now_ns).first;
      finish({f}, taken);
    }
  };
  repeat_acks(1 + 3);  // the first is new; three repeats, the most the window allows
  EXPECT_EQ(b().lcore->counters().ack_storm_drops, 0u);
  Frame* data = b().pool.frame(c.data("d"), 0);
  ASSERT_EQ(offer(*b().lcore, 0, {data}, b().now_ns).first, 1u);
  b().pool.free(data);
  repeat_acks(3);
  EXPECT_EQ(b().lcore->counters().ack_storm_drops, 0u);
  repeat_acks(1);
  EXPECT_EQ(b().lcore->counters().ack_storm_drops, 1u);
}

// Every frame of a run has its IPv4 header checksum verified over the whole header: in a run
// started in this burst and in one carried over from the last. A frame whose TTL and
// identification differ from the run's first, with a checksum made right, is taken; one whose
// checksum does not verify stops the fast path there.
TEST_P(FastPath, EachFrameOfARunHasItsHeaderChecksumVerified) {
  Endpoint c = make_client();
  Endpoint o = settle(c);
  const auto changed = [](std::vector<uint8_t> frame, bool checksum_right) {
    uint8_t* ip = frame.data() + net::kEthernetBytes;
    ip[4] = uint8_t(ip[4] + 0x11);  // identification
    ip[8] = uint8_t(ip[8] - 7);     // TTL
    if (checksum_right) {
      ip[10] = ip[11] = 0;
      const uint16_t check = net::internet_checksum(std::span<const uint8_t>(ip, net::kIpv4Bytes));
      ip[10] = uint8_t(check >> 8);
      ip[11] = uint8_t(check);
    }
    return frame;
  };
  const uint32_t seq = o.rcv_nxt;
  for (int burst = 0; burst < 2; ++burst) {
    SCOPED_TRACE(burst == 0 ? "run started in the burst" : "run from the last burst");
    std::vector<Frame*> frames = {
        b().pool.frame(c.data("a"), 0), b().pool.frame(changed(c.data("b"), true), 0),
        b().pool.frame(changed(c.data("c"), false), 0), b().pool.frame(c.data("d"), 0)};
    const auto [taken, ports] = offer(*b().lcore, 0, frames, b().now_ns);
    ASSERT_EQ(taken, 2u);
    const Sent second = sent_of(frames[1]);
    EXPECT_EQ(second.p.dst_ip, kOwnerIp);
    EXPECT_EQ(second.p.seq, seq + uint32_t(burst) * 4 + 1);
    EXPECT_EQ(second.payload(), "b");
    finish(frames, taken);  // "c" is dropped; "d" goes the general way
  }
  EXPECT_EQ(b().lcore->counters().fast_path, 4u);
}

// Segments the fast path takes keep a spliced flow alive; it expires only when the idle time
// has passed since the last of them.
TEST_P(FastPath, SegmentsTakenKeepTheFlowFromExpiring) {
  engine::LcoreConfig cfg = config();
  cfg.established_idle_ms = 10'000;
  rebuild(cfg);
  Endpoint c = make_client();
  settle(c);
  ASSERT_EQ(b().lcore->flows(), 1u);
  for (int i = 0; i < 3; ++i) {
    b().jump_ms(6'000);
    Frame* f = b().pool.frame(c.data("k"), 0);
    ASSERT_EQ(offer(*b().lcore, 0, {f}, b().now_ns).first, 1u);
    b().pool.free(f);
  }
  b().jump_ms(6'000);
  EXPECT_EQ(b().lcore->flows(), 1u) << "18 s in, 6 s after the last segment";
  EXPECT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kSpliced);
  b().jump_ms(5'000);
  EXPECT_EQ(b().lcore->flows(), 0u) << "11 s after the last segment";
  EXPECT_EQ(b().lcore->counters().flows_expired, 1u);
}

namespace {

// The lcore's sessions as the engine's thread lists them for the admin API: the flow table
// walked `step` entries at a time, then the oldest `limit`.
std::vector<engine::Lcore::FlowView> list_sessions(const engine::Lcore& lcore,
                                                   size_t limit = SIZE_MAX, uint32_t step = 3) {
  engine::Lcore::FlowListing listing;
  while (!lcore.list_flows(listing, step)) {
  }
  return lcore.flow_views(listing, limit);
}

}  // namespace

// The lcore's sessions for the admin API (`sluicectl sessions`): every flow that is still a
// session, oldest first, with its client, destination, owner node, age and the payload bytes
// spliced each way, whichever path (the fast one or the general one) took them; a flow in the
// prelude has no destination yet, and one that ended is no longer listed, even when it ended
// after the walk of the table found it.
TEST_P(FastPath, TheLcoreListsItsSessionsWithTheBytesSplicedEachWay) {
  EXPECT_TRUE(list_sessions(*b().lcore).empty());
  Endpoint c = make_client(40001, 0x10000000);
  Endpoint o = settle(c);  // settle() sent "x" to the owner by the general path
  b().jump_ms(2'500);
  Endpoint late = make_client(40002, 0x20000000);
  const Sent syn_ack = only(b().deliver(late.segment(net::kSyn), 0));
  late.snd_nxt = late.isn + 1;
  late.receive(syn_ack);
  b().deliver(late.segment(net::kAck), 0);  // the cookie's ACK: a flow in the prelude

  // Client -> owner by the fast path (a run of two) and by the general path (burst());
  // owner -> client by both.
  std::vector<Frame*> up = {b().pool.frame(c.data("abcd"), 0), b().pool.frame(c.data("ef"), 0)};
  ASSERT_EQ(offer(*b().lcore, 0, up, b().now_ns).first, 2u);
  finish(up, 2);
  ASSERT_EQ(b().deliver(c.data("ghi"), 0).size(), 1u);
  std::vector<Frame*> down = {b().pool.frame(o.data("0123456"), 1)};
  ASSERT_EQ(offer(*b().lcore, 1, down, b().now_ns).first, 1u);
  finish(down, 1);
  ASSERT_EQ(b().deliver(o.data("78"), 1).size(), 1u);

  const std::vector<engine::Lcore::FlowView> views = list_sessions(*b().lcore);
  ASSERT_EQ(views.size(), 2u);
  const engine::Lcore::FlowView& v = views[0];
  EXPECT_EQ(v.id, 1u);
  EXPECT_EQ(v.client, tuple_of(c));
  EXPECT_EQ(v.state, "spliced");
  EXPECT_EQ(v.node, 7u);  // ScriptedRouter's owner
  EXPECT_FALSE(v.to_spill);
  EXPECT_EQ(v.vhost, b().router.last_vhost);
  EXPECT_EQ(v.queue, "q1");
  EXPECT_EQ(v.bytes_in, 1u + 4u + 2u + 3u);  // "x", then the fast path's 6 and the general 3
  EXPECT_EQ(v.bytes_out, 7u + 2u);
  EXPECT_GE(v.age_ms, 2'500u);
  const engine::Lcore::FlowView& p = views[1];
  EXPECT_EQ(p.id, 2u);
  EXPECT_EQ(p.client, tuple_of(late));
  EXPECT_EQ(p.state, "prelude");
  EXPECT_EQ(p.node, UINT32_MAX);
  EXPECT_TRUE(p.queue.empty());
  EXPECT_EQ(p.bytes_in + p.bytes_out, 0u);
  EXPECT_LT(p.age_ms, v.age_ms - 2'000);

  const std::vector<engine::Lcore::FlowView> oldest = list_sessions(*b().lcore, 1);
  ASSERT_EQ(oldest.size(), 1u);
  EXPECT_EQ(oldest[0].id, 1u);

  // A RST from the client ends the first flow after the walk found it: it lingers, and is no
  // longer a session.
  engine::Lcore::FlowListing listing;
  while (!b().lcore->list_flows(listing, 1)) {
  }
  ASSERT_EQ(listing.found.size(), 2u);
  const auto first = std::find_if(listing.found.begin(), listing.found.end(),
                                  [](const auto& f) { return f.first == 1u; });
  ASSERT_NE(first, listing.found.end());
  const uint32_t first_entry = first->second;
  b().deliver(c.segment(net::kRst | net::kAck), 0);
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kLinger);
  const std::vector<engine::Lcore::FlowView> after = b().lcore->flow_views(listing, 10);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].id, 2u);
  EXPECT_EQ(list_sessions(*b().lcore).size(), 1u);

  // Its linger over, the first flow's entry goes to the next flow, which is in the prelude:
  // it has no destination, not the one the entry's last flow bound to.
  b().jump_ms(2'100);
  ASSERT_EQ(b().lcore->flow_state(tuple_of(c)), FlowState::kFree);
  Endpoint again = make_client(40003, 0x30000000);
  const Sent again_syn_ack = only(b().deliver(again.segment(net::kSyn), 0));
  again.snd_nxt = again.isn + 1;
  again.receive(again_syn_ack);
  b().deliver(again.segment(net::kAck), 0);
  engine::Lcore::FlowListing relisted;
  while (!b().lcore->list_flows(relisted, 3)) {
  }
  const auto third = std::find_if(relisted.found.begin(), relisted.found.end(),
                                  [](const auto& f) { return f.first == 3u; });
  ASSERT_NE(third, relisted.found.end());
  ASSERT_EQ(third->second, first_entry);
  const std::vector<engine::Lcore::FlowView> reused = b().lcore->flow_views(relisted, 10);
  const auto view = std::find_if(reused.begin(), reused.end(),
                                 [](const engine::Lcore::FlowView& w) { return w.id == 3u; });
  ASSERT_NE(view, reused.end());
  EXPECT_EQ(view->state, "prelude");
  EXPECT_TRUE(view->vhost.empty());
  EXPECT_TRUE(view->queue.empty());
}

// The fast path keeps the flow and direction of the frames it takes, within a burst and
// between bursts, and checks each frame against them: frames of two flows in turn each go to
// their own peer, and a frame of the remembered flow that is a fragment stops it.
TEST_P(FastPath, FramesOfSeveralFlowsInTurnEachGoToTheirOwnPeer) {
  Endpoint a = make_client(40001, 0x10000000);
  Endpoint oa = settle(a);
  Endpoint c = make_client(40002, 0x20000000);
  Endpoint oc = settle(c);
  const uint32_t a_seq = oa.rcv_nxt;
  const uint32_t c_seq = oc.rcv_nxt;
  std::vector<Frame*> frames = {b().pool.frame(a.data("a1"), 0), b().pool.frame(c.data("c1"), 0),
                                b().pool.frame(a.data("a2"), 0)};
  std::vector<uint8_t> fragment = a.data("a3");
  uint8_t* ip = fragment.data() + net::kEthernetBytes;
  ip[6] |= 0x20;  // more fragments; the header checksum made right again
  ip[10] = ip[11] = 0;
  const uint16_t check = net::internet_checksum(std::span<const uint8_t>(ip, net::kIpv4Bytes));
  ip[10] = uint8_t(check >> 8);
  ip[11] = uint8_t(check);
  frames.push_back(b().pool.frame(fragment, 0));
  frames.push_back(b().pool.frame(a.data("a4"), 0));
  const auto [taken, ports] = offer(*b().lcore, 0, frames, b().now_ns);
  ASSERT_EQ(taken, 3u);
  EXPECT_EQ(ports, (std::vector<uint16_t>{1, 1, 1}));
  const Sent a1 = sent_of(frames[0]);
  const Sent c1 = sent_of(frames[1]);
  const Sent a2 = sent_of(frames[2]);
  EXPECT_EQ(a1.p.dst_port, oa.tcp_port);
  EXPECT_EQ(a1.p.seq, a_seq);
  EXPECT_EQ(a1.payload(), "a1");
  EXPECT_EQ(c1.p.dst_port, oc.tcp_port);
  EXPECT_EQ(c1.p.seq, c_seq);
  EXPECT_EQ(c1.payload(), "c1");
  EXPECT_EQ(a2.p.dst_port, oa.tcp_port);
  EXPECT_EQ(a2.p.seq, a_seq + 2);
  EXPECT_EQ(a2.payload(), "a2");
  finish(frames, taken);  // the fragment is dropped, "a4" goes the general way

  // The next burst, from the owners, in turn again; then one of flow a's client frames.
  std::vector<Frame*> back = {b().pool.frame(oc.data("r1"), 1), b().pool.frame(oa.data("r2"), 1),
                              b().pool.frame(oc.data("r3"), 1)};
  const auto [back_taken, back_ports] = offer(*b().lcore, 1, back, b().now_ns);
  ASSERT_EQ(back_taken, 3u);
  EXPECT_EQ(back_ports, (std::vector<uint16_t>{0, 0, 0}));
  EXPECT_EQ(sent_of(back[0]).p.dst_port, c.tcp_port);
  EXPECT_EQ(sent_of(back[1]).p.dst_port, a.tcp_port);
  EXPECT_EQ(sent_of(back[2]).p.dst_port, c.tcp_port);
  EXPECT_EQ(sent_of(back[2]).payload(), "r3");
  finish(back, back_taken);
  Frame* again = b().pool.frame(a.data("a5"), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {again}, b().now_ns).first, 1u);
  EXPECT_EQ(sent_of(again).p.dst_port, oa.tcp_port);
  b().pool.free(again);
}

// A run's headers say nothing of the next flow's: after segments with the timestamp option
// (66 bytes of headers), a minimum-size frame of a flow without it (64 bytes, 10 of payload
// and padding) is taken, and a frame of the first flow cut short of its headers is not.
TEST_P(FastPath, AShortFrameOfAnotherFlowIsTakenAfterARunWithTimestamps) {
  Endpoint a = make_client(40001, 0x10000000);
  Endpoint oa = settle(a);
  Endpoint c = make_client(40002, 0x20000000);
  c.timestamps = false;
  Endpoint oc = settle(c);
  std::vector<uint8_t> small = c.data("0123456789");
  ASSERT_EQ(small.size(), 64u);
  std::vector<uint8_t> cut = a.data("a3");
  cut.resize(net::kEthernetBytes + net::kIpv4Bytes + net::kTcpBytes + 4);
  std::vector<Frame*> frames = {b().pool.frame(a.data("a1"), 0), b().pool.frame(a.data("a2"), 0),
                                b().pool.frame(small, 0), b().pool.frame(cut, 0)};
  const auto [taken, ports] = offer(*b().lcore, 0, frames, b().now_ns);
  EXPECT_EQ(taken, 3u);
  const Sent s = sent_of(frames[2]);
  EXPECT_EQ(s.p.dst_port, oc.tcp_port);
  EXPECT_EQ(s.payload(), "0123456789");
  EXPECT_EQ(sent_of(frames[1]).p.dst_port, oa.tcp_port);
  finish(frames, taken);
}

// One rx port may carry frames that leave by different ports: here the owners of two flows
// on port 1, whose clients are on ports 0 and 2. The fast path gives a run per port, in order
// (offer() checks that runs next to each other differ).
TEST_P(FastPath, ABurstForSeveralPortsIsTakenAsARunPerPort) {
  engine::LcoreConfig cfg = config();
  const net::MacAddr port2_mac{{0x02, 0, 0, 0, 0xee, 0x02}};
  cfg.port_macs.push_back(port2_mac);
  rebuild(cfg);
  Endpoint a = make_client(40001, 0x10000000);
  Endpoint oa = settle(a);
  Endpoint c = make_client(40002, 0x20000000);
  c.port_id = 2;
  c.gw_mac = port2_mac;
  const Spliced r = splice_session(*b().lcore, b().pool, c, b().now_ns);
  ASSERT_TRUE(r.owner) << r.error;
  Endpoint oc = *r.owner;
  // The first ACK each way retires the sequence maps' edits, as in settle().
  for (const Sent& s : b().deliver(oc.segment(net::kAck), 1))
    c.receive(s);
  for (const Sent& s : b().deliver(c.data("x"), 2))
    oc.receive(s);

  std::vector<Frame*> frames = {b().pool.frame(oa.data("r1"), 1), b().pool.frame(oc.data("s1"), 1),
                                b().pool.frame(oc.data("s2"), 1), b().pool.frame(oa.data("r2"), 1)};
  const auto [taken, ports] = offer(*b().lcore, 1, frames, b().now_ns);
  ASSERT_EQ(taken, 4u);
  EXPECT_EQ(ports, (std::vector<uint16_t>{0, 2, 2, 0}));
  EXPECT_EQ(sent_of(frames[0]).p.dst_port, a.tcp_port);
  EXPECT_EQ(sent_of(frames[0]).payload(), "r1");
  EXPECT_EQ(sent_of(frames[1]).p.dst_port, c.tcp_port);
  EXPECT_EQ(sent_of(frames[2]).payload(), "s2");
  EXPECT_EQ(sent_of(frames[3]).p.dst_port, a.tcp_port);
  EXPECT_EQ(sent_of(frames[3]).payload(), "r2");
  finish(frames, taken);
}

// The fast path remembers its last flow; a flow freed and its slot taken by another session
// must not be found that way.
TEST_P(FastPath, AFreedFlowIsNotFoundThroughTheLastLookup) {
  Endpoint a = make_client(40001, 0x10000000);
  Endpoint oa = settle(a);
  Frame* f = b().pool.frame(a.data("a"), 0);
  ASSERT_EQ(offer(*b().lcore, 0, {f}, b().now_ns).first, 1u);
  b().pool.free(f);
  b().deliver(a.segment(net::kRst | net::kAck), 0);
  b().advance_ms(b().config.reset_linger_ms + 1);
  ASSERT_EQ(b().lcore->flows(), 0u);
  Endpoint c = make_client(40002, 0x20000000);
  settle(c);
  ASSERT_EQ(b().lcore->flows(), 1u);
  Frame* stale = b().pool.frame(a.data("late"), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {stale}, b().now_ns).first, 0u);
  finish({stale}, 0);
  Frame* fresh = b().pool.frame(c.data("c"), 0);
  EXPECT_EQ(offer(*b().lcore, 0, {fresh}, b().now_ns).first, 1u);
  b().pool.free(fresh);
  (void)oa;
}

INSTANTIATE_TEST_SUITE_P(Builds, FastPath, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "X86_64_V3" : "Baseline";
                         });

// An lcore runs the x86-64-v3 build exactly when its config allows it and the CPU has those
// features (GCC on x86-64; elsewhere, the baseline only).
TEST(FastPathBuild, TheV3BuildRunsWhereTheCpuHasIt) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  const bool cpu_v3 = __builtin_cpu_supports("x86-64-v3");
#else
  const bool cpu_v3 = false;
#endif
  Bench on(fast_path_config(true));
  Bench off(fast_path_config(false));
  EXPECT_EQ(on.lcore->fast_path_v3(), cpu_v3);
  EXPECT_FALSE(off.lcore->fast_path_v3());
}

// ---- the established-flow path -------------------------------------------------------------

// Three lcores take the same spliced session and the same bursts (data and ACKs both ways,
// with and without timestamps, SACK, window changes, retransmissions, corrupt, VLAN-tagged and
// broadcast frames, FIN, RST and a new SYN on the lingering tuple, the client's frames on
// another port, several frames per burst so that the paths alternate within one), from a fixed
// seed: one with the established-flow path, one with LcoreConfig::established_path off (every
// frame through the general parse and dispatch), and one delivered as the DPDK driver does
// (the fast path first, Lcore::fast). All must send the same frames, byte for byte, and end in
// the same states. The seeds also vary the legs' options: window scales equal or not, or not
// used, and timestamps on the owner leg or not.
TEST(EstablishedPath, SendsWhatTheGeneralPathSends) {
  engine::LcoreConfig on_config = default_config();
  engine::LcoreConfig off_config = default_config();
  off_config.established_path = false;
  engine::LcoreConfig baseline_config = default_config();
  baseline_config.fast_path_v3 = false;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Bench on(on_config);
    Bench off(off_config);
    Bench fast(on_config);             // the fast path's x86-64-v3 build where the CPU has it
    Bench fast_base(baseline_config);  // its baseline build
    Endpoint fresh = make_client(uint16_t(40000 + seed));
    OwnerSide owner_side;
    switch (seed % 4) {
      case 0:  // the client does not scale its window
        fresh.wscale = std::nullopt;
        break;
      case 1:  // the owner scales by what the client does: no rescaling
        owner_side.wscale = on_config.window_scale;
        fresh.wscale = on_config.window_scale;
        break;
      case 2:  // the owner does not use timestamps
        owner_side.timestamps = false;
        break;
      default:
        break;
    }
    Endpoint c;
    std::optional<Endpoint> o;
    for (Bench* b : {&on, &off, &fast, &fast_base}) {
      b->lcore->add_neighbor(kOwnerIp, kOwnerMac);
      Endpoint copy = fresh;
      const Spliced r = splice_session(*b->lcore, b->pool, copy, b->now_ns, owner_side);
      ASSERT_TRUE(r.owner.has_value()) << r.error;
      if (!o) {
        o = r.owner;
        c = copy;
      }
    }
    std::mt19937 rng(seed);
    const auto pick = [&](uint32_t n) { return uint32_t(rng() % n); };
    const auto mutate = [&](std::vector<uint8_t> f) {
      switch (pick(4)) {
        case 0:  // a bit of the IPv4 header: its checksum no longer verifies
          f[net::kEthernetBytes + 1 + pick(19)] ^= uint8_t(1u << pick(8));
          break;
        case 1:  // broadcast
          std::fill(f.begin(), f.begin() + 6, uint8_t(0xff));
          break;
        case 2: {  // 802.1Q tag
          const uint8_t tag[] = {0x81, 0x00, 0x00, 0x05};
          f.insert(f.begin() + 12, std::begin(tag), std::end(tag));
          break;
        }
        default:  // cut short
          f.resize(f.size() - 1 - pick(uint32_t(f.size()) - 1));
          break;
      }
      return f;
    };
    for (int step = 0; step < 120; ++step) {
      std::vector<std::pair<std::vector<uint8_t>, uint16_t>> burst;
      const uint32_t n = 1 + pick(6);
      for (uint32_t i = 0; i < n; ++i) {
        Endpoint& e = pick(2) == 0 ? c : *o;
        const uint16_t port = e.port_id;
        const std::string payload(pick(3) == 0 ? 0 : 1 + pick(1400), char('a' + pick(26)));
        e.timestamps = pick(8) != 0;
        e.window = uint16_t(200 + pick(2000));
        switch (pick(12)) {
          case 0:
            burst.emplace_back(mutate(e.data(payload)), port);
            break;
          case 1: {  // a retransmission from before the splice or of recent bytes
            const uint32_t back = pick(2) == 0 ? 1 + pick(4000) : 1 + pick(64);
            burst.emplace_back(e.segment(net::kAck | net::kPsh, payload, e.snd_nxt - back), port);
            break;
          }
          case 2: {  // SACK
            const net::SackBlock blocks[] = {{e.rcv_nxt + 10, e.rcv_nxt + 20 + pick(3000)}};
            burst.emplace_back(e.segment(net::kAck, {}, std::nullopt, blocks), port);
            break;
          }
          case 3:
            if (pick(4) == 0) burst.emplace_back(e.data("", net::kFin), port);
            break;
          case 4:
            if (pick(8) == 0) burst.emplace_back(e.segment(net::kRst | net::kAck), port);
            break;
          case 5:
            if (&e == &c && pick(4) == 0) {  // the client's port comes round again
              c.isn += 0x1000000;
              c.snd_nxt = c.isn;
              burst.emplace_back(c.segment(net::kSyn), c.port_id);
              c.snd_nxt = c.isn + 1;
            }
            break;
          case 6:
          case 7:
            burst.emplace_back(e.segment(net::kAck), port);
            break;
          case 8:
            if (&e == &c && pick(6) == 0) {  // the client's frames come in on the other port
              c.port_id = uint16_t(1 - c.port_id);
              c.gw_mac = c.port_id == 0 ? kPort0Mac : kPort1Mac;
            }
            burst.emplace_back(e.data(payload), e.port_id);
            break;
          default:
            burst.emplace_back(e.data(payload), port);
            break;
        }
      }
      std::vector<Sent> sent[4];
      for (int k = 0; k < 4; ++k) {
        Bench& b = k == 0 ? on : k == 1 ? off : k == 2 ? fast : fast_base;
        std::vector<Frame*> frames;
        frames.reserve(burst.size());
        for (const auto& [bytes, port] : burst)
          frames.push_back(b.pool.frame(bytes, port));
        sent[k] = k >= 2 ? b.deliver_as_driver(frames) : b.deliver(frames);
      }
      for (int k : {0, 2, 3}) {
        SCOPED_TRACE(k == 0   ? "established-flow path"
                     : k == 2 ? "fast path"
                              : "fast path, baseline");
        ASSERT_EQ(sent[k].size(), sent[1].size()) << "step " << step;
        for (size_t i = 0; i < sent[k].size(); ++i) {
          ASSERT_EQ(sent[k][i].port, sent[1][i].port) << "step " << step << " frame " << i;
          ASSERT_EQ(sent[k][i].bytes, sent[1][i].bytes) << "step " << step << " frame " << i;
          EXPECT_EQ(sent[k][i].parsed, net::Reason::kOk);
        }
      }
      for (const Sent& s : sent[0]) {
        if (!s.tcp()) continue;
        if (s.p.dst_ip == c.ip && s.p.dst_port == c.tcp_port) c.receive(s);
        if (s.port == 1 && s.p.dst_ip == kOwnerIp) o->receive(s);
      }
      // Time passes alike for both: retransmissions, the ACK-storm window, linger timers.
      const uint64_t ms = pick(4) == 0 ? 1 + pick(3000) : 0;
      if (ms != 0) {
        const std::vector<Sent> t0 = on.jump_ms(ms);
        const std::vector<Sent> t1 = off.jump_ms(ms);
        const std::vector<Sent> t2 = fast.jump_ms(ms);
        const std::vector<Sent> t3 = fast_base.jump_ms(ms);
        ASSERT_EQ(t0.size(), t1.size());
        ASSERT_EQ(t2.size(), t1.size());
        ASSERT_EQ(t3.size(), t1.size());
        for (size_t i = 0; i < t0.size(); ++i) {
          ASSERT_EQ(t0[i].bytes, t1[i].bytes);
          ASSERT_EQ(t2[i].bytes, t1[i].bytes);
          ASSERT_EQ(t3[i].bytes, t1[i].bytes);
        }
      }
      for (Bench* b : {&on, &fast, &fast_base}) {
        ASSERT_EQ(b->lcore->flow_state(tuple_of(c)), off.lcore->flow_state(tuple_of(c)));
        ASSERT_EQ(b->lcore->flows(), off.lcore->flows());
        ASSERT_EQ(b->lcore->lingering_flows(), off.lcore->lingering_flows());
      }
    }
    const engine::LcoreCounters& a = on.lcore->counters();
    const engine::LcoreCounters& g = off.lcore->counters();
    const engine::LcoreCounters& f = fast.lcore->counters();
    const engine::LcoreCounters& fb = fast_base.lcore->counters();
    EXPECT_GT(a.established_path, 0u);
    EXPECT_LE(a.established_path,
              a.c2o_packets + a.o2c_packets + a.ack_storm_drops + a.removed_range);
    EXPECT_EQ(g.established_path, 0u);
    EXPECT_EQ(a.fast_path, 0u);  // burst() alone never takes it
    EXPECT_GT(f.fast_path, 0u);
    EXPECT_EQ(f.fast_path, fast.fast_taken);
    EXPECT_LE(f.fast_path, f.established_path);
    EXPECT_EQ(fb.fast_path, f.fast_path);
    EXPECT_EQ(fb.fast_path, fast_base.fast_taken);
    EXPECT_FALSE(fast_base.lcore->fast_path_v3());
    for (const engine::LcoreCounters* x : {&a, &f, &fb}) {
      SCOPED_TRACE(x == &a   ? "established-flow path"
                   : x == &f ? "fast path"
                             : "fast path, baseline");
      EXPECT_EQ(x->c2o_packets, g.c2o_packets);
      EXPECT_EQ(x->o2c_packets, g.o2c_packets);
      EXPECT_EQ(x->c2o_bytes, g.c2o_bytes);
      EXPECT_EQ(x->o2c_bytes, g.o2c_bytes);
      EXPECT_EQ(x->rx_invalid, g.rx_invalid);
      EXPECT_EQ(x->flows_reopened, g.flows_reopened);
      EXPECT_EQ(x->flow_resets, g.flow_resets);
      EXPECT_EQ(x->removed_range, g.removed_range);
      EXPECT_EQ(x->ack_storm_drops, g.ack_storm_drops);
      EXPECT_EQ(x->rx_frames, g.rx_frames);
      EXPECT_EQ(x->tx_frames, g.tx_frames);
    }
  }
}

// The fast path counts the carries of its translations in the TCP checksum (the sums are
// taken modulo 0xffff, fast_path.cc): a sequence number, acknowledgment or timestamp that
// wraps past 2^32 when moved changes the sum by one less, or one more, than the run's
// constant. Flows whose legs' numbers lie near 2^32, segments each way through the driver's
// fast path and through the general path: the same bytes, and translations that wrapped and
// that did not among them.
TEST(EstablishedPath, TranslationsThatWrapPast2To32GiveTheGeneralPathsBytes) {
  engine::LcoreConfig fast_config = default_config();
  engine::LcoreConfig baseline_config = default_config();
  baseline_config.fast_path_v3 = false;
  engine::LcoreConfig general_config = default_config();
  general_config.established_path = false;
  const uint32_t isns[] = {0xffffff80u, 0xfffff000u, 0x00000040u, 0x80000000u};
  const uint32_t clocks[] = {0xffffffc0u, 900000u};  // both ends' first timestamps
  size_t seq_carried = 0, seq_plain = 0, ack_borrowed = 0, ack_plain = 0;
  size_t ts_carried = 0, ts_plain = 0;
  uint16_t src_port = 41000;
  for (const uint32_t client_isn : isns) {
    for (const uint32_t owner_isn : isns) {
      for (const uint32_t clock : clocks) {
        SCOPED_TRACE("client ISN " + std::to_string(client_isn) + ", owner ISN " +
                     std::to_string(owner_isn) + ", clock " + std::to_string(clock));
        Bench general(general_config);
        Bench fast(fast_config);
        Bench fast_base(baseline_config);
        Endpoint fresh = make_client(src_port++, client_isn);
        fresh.ts_value = clock;
        OwnerSide side;
        side.isn = owner_isn;
        side.ts_value = clock + 0x100;
        Endpoint c;
        Endpoint o;
        for (Bench* b : {&general, &fast, &fast_base}) {
          b->lcore->add_neighbor(kOwnerIp, kOwnerMac);
          Endpoint copy = fresh;
          const Spliced r = splice_session(*b->lcore, b->pool, copy, b->now_ns, side);
          ASSERT_TRUE(r.owner.has_value()) << r.error;
          c = copy;
          o = *r.owner;
        }
        // The first segment each way retires the sequence maps' edits, then the fast path
        // may take the rest.
        for (int step = 0; step < 24; ++step) {
          Endpoint& e = step % 2 == 0 ? c : o;
          const std::string payload(step % 3 == 2 ? 0 : size_t(1 + step * 37), 'p');
          const std::vector<uint8_t> in = payload.empty() ? e.segment(net::kAck) : e.data(payload);
          e.ts_value += 0x20;
          const std::vector<Sent> want = general.deliver(in, e.port_id);
          for (Bench* b : {&fast, &fast_base}) {
            SCOPED_TRACE(b == &fast ? "fast path" : "fast path, baseline");
            const std::vector<Sent> got = b->deliver_as_driver({b->pool.frame(in, e.port_id)});
            ASSERT_EQ(got.size(), want.size()) << "step " << step;
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(got[i].port, want[i].port) << "step " << step;
              ASSERT_EQ(got[i].bytes, want[i].bytes) << "step " << step;
              ASSERT_EQ(got[i].parsed, net::Reason::kOk) << "step " << step;  // checksums verify
            }
          }
          for (const Sent& s : want) {
            if (s.p.dst_ip == c.ip && s.p.dst_port == c.tcp_port) c.receive(s);
            if (s.p.dst_ip == kOwnerIp) o.receive(s);
          }
          if (step < 2 || want.size() != 1) continue;
          // The translations of this segment: seq' = seq + base, ack' = ack - base, one
          // timestamp moved by the flow's offset (modulo 2^32).
          Sent sent_in;
          sent_in.bytes = in;
          ASSERT_EQ(net::parse(sent_in.bytes, {}, &sent_in.p), net::Reason::kOk);
          const net::Packet& a = sent_in.p;
          const net::Packet& b = want[0].p;
          (b.seq < a.seq ? seq_carried : seq_plain) += 1;
          (b.ack > a.ack ? ack_borrowed : ack_plain) += 1;
          if (a.options.has_timestamps && b.options.has_timestamps) {
            // Towards the owner the echo moves, towards the client the value.
            const bool to_owner = &e == &c;
            const uint32_t before =
                to_owner ? a.options.timestamps.echo_reply : a.options.timestamps.value;
            const uint32_t after =
                to_owner ? b.options.timestamps.echo_reply : b.options.timestamps.value;
            if (before != after) (after < before ? ts_carried : ts_plain) += 1;
          }
        }
        EXPECT_GT(fast.lcore->counters().fast_path, 10u);
        EXPECT_EQ(fast_base.lcore->counters().fast_path, fast.lcore->counters().fast_path);
      }
    }
  }
  EXPECT_GT(seq_carried, 0u);
  EXPECT_GT(seq_plain, 0u);
  EXPECT_GT(ack_borrowed, 0u);
  EXPECT_GT(ack_plain, 0u);
  EXPECT_GT(ts_carried, 0u);
  EXPECT_GT(ts_plain, 0u);
}

}  // namespace
