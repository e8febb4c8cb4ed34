// sluice-load's command line: defaults, sizes, and an error naming the option for each bad one.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tools/sluice-load/options.h"

namespace sluice::load {
namespace {

CommandLine parse(const std::vector<std::string>& args) {
  return parse_command_line(args);
}

TEST(LoadOptions, DefaultsAreARunOfTenSecondsWithReceipts) {
  const CommandLine cl = parse({});
  ASSERT_EQ(cl.action, CommandLine::Action::kLoad) << cl.message;
  EXPECT_EQ(cl.load.host, "127.0.0.1");
  EXPECT_EQ(cl.load.port, 61613);
  EXPECT_TRUE(cl.load.receipts);
  EXPECT_EQ(cl.load.duration_s, Limits::kDurationDefault_s);
  EXPECT_EQ(cl.load.producers(), 1u);
  EXPECT_EQ(cl.load.consumers(), 0u);
}

TEST(LoadOptions, ParsesEveryKindOfOption) {
  const CommandLine cl = parse({"--target",
                                "127.0.0.1:27141",
                                "--vhost",
                                "v",
                                "--login",
                                "u",
                                "--passcode",
                                "p",
                                "-c",
                                "5",
                                "-p",
                                "2",
                                "--consumer-connections",
                                "3",
                                "--consumers-per-connection",
                                "4",
                                "-q",
                                "10",
                                "--queue-pattern",
                                "q-{i}",
                                "--spread",
                                "random",
                                "--size",
                                "uniform:64-1K",
                                "--rate",
                                "100",
                                "--count",
                                "50",
                                "--window",
                                "8",
                                "--ack",
                                "client-individual",
                                "--prefetch",
                                "16",
                                "--new-session",
                                "5",
                                "--max-errors",
                                "3",
                                "--json"});
  ASSERT_EQ(cl.action, CommandLine::Action::kLoad) << cl.message;
  const LoadOptions& o = cl.load;
  EXPECT_EQ(o.port, 27141);
  EXPECT_EQ(o.producers(), 10u);
  EXPECT_EQ(o.consumers(), 12u);
  EXPECT_EQ(o.queue_name(7), "q-7");
  EXPECT_EQ(o.spread, Spread::kRandom);
  EXPECT_EQ(o.size.kind, SizeSpec::Kind::kUniform);
  EXPECT_EQ(o.size.min, 64u);
  EXPECT_EQ(o.size.max, 1024u);
  EXPECT_EQ(o.ack, AckMode::kClientIndividual);
  EXPECT_EQ(o.session_messages, 5u);
  EXPECT_EQ(o.count, 50u);
  EXPECT_EQ(o.duration_s, Limits::kDurationMax_s);  // count-bound, the day-long cap still holds
  EXPECT_TRUE(o.json);
}

TEST(LoadOptions, ServeTakesAListenAddress) {
  const CommandLine cl = parse({"serve", "--listen", "127.0.0.1:7000", "--duration", "5"});
  ASSERT_EQ(cl.action, CommandLine::Action::kServe) << cl.message;
  EXPECT_EQ(cl.serve.port, 7000);
  EXPECT_EQ(cl.serve.duration_s, 5);
}

TEST(LoadOptions, HelpIsNotAnError) {
  const CommandLine cl = parse({"--help"});
  EXPECT_EQ(cl.action, CommandLine::Action::kHelp);
  EXPECT_NE(cl.message.find("--new-session"), std::string::npos);
}

TEST(LoadOptions, SizesTakeUnitsAndDistributions) {
  Result<SizeSpec> s = parse_size("4K");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->min, 4096u);
  s = parse_size("exp:512");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->kind, SizeSpec::Kind::kExponential);
  EXPECT_EQ(s->mean, 512u);
  EXPECT_FALSE(parse_size("2M"));
  EXPECT_FALSE(parse_size("uniform:9-3"));
  s = parse_size("12Q");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message, "'12Q' is not a size in bytes (256, 4K, 1M; at most 1M)");
}

struct BadOption {
  std::vector<std::string> args;
  std::string names;  // the option the message must name
};

class LoadOptionsError : public ::testing::TestWithParam<BadOption> {};

TEST_P(LoadOptionsError, NamesTheOption) {
  const CommandLine cl = parse(GetParam().args);
  EXPECT_EQ(cl.action, CommandLine::Action::kError);
  EXPECT_NE(cl.message.find(GetParam().names), std::string::npos) << cl.message;
}

INSTANTIATE_TEST_SUITE_P(
    EachBadOption, LoadOptionsError,
    ::testing::Values(
        BadOption{{"--target", "nohost"}, "--target"},
        BadOption{{"--target", "127.0.0.1:0"}, "--target"},
        BadOption{{"--target", "example.com:61613"}, "--target"},
        BadOption{{"--connections", "0"}, "--connections"},
        BadOption{{"--connections", "20000"}, "--connections"},
        BadOption{{"--connections", "many"}, "--connections"},
        BadOption{{"-p", "0"}, "--producers-per-connection"},
        BadOption{{"--consumers-per-connection", "5000"}, "--consumers-per-connection"},
        BadOption{{"-q", "0"}, "--queues"},
        BadOption{{"-q", "3", "--consumer-connections", "2"}, "--consumer-connections"},
        BadOption{{"-q", "1000", "-c", "2000"}, "--queues"},
        BadOption{{"-q", "3", "--queue-pattern", "fixed"}, "--queue-pattern"},
        BadOption{{"--size", "huge"}, "--size"}, BadOption{{"--size", "uniform:10"}, "--size"},
        BadOption{{"--rate", "-1"}, "--rate"}, BadOption{{"--duration", "100000"}, "--duration"},
        BadOption{{"--window", "0"}, "--window"}, BadOption{{"--window", "5000"}, "--window"},
        BadOption{{"--ack", "sometimes"}, "--ack"}, BadOption{{"--spread", "evenly"}, "--spread"},
        BadOption{{"--new-session", "5", "--no-receipts"}, "--new-session"},
        BadOption{{"--passcode-file", "/nonexistent/sluice-load-passcode"}, "--passcode-file"},
        BadOption{{"--interval", "0"}, "--interval"},
        BadOption{{"--drain-timeout", "1000"}, "--drain-timeout"},
        BadOption{{"--prefetch", "70000"}, "--prefetch"},
        BadOption{{"-c", "1000", "--count", "2000000"}, "--count"},
        BadOption{{"--vhost", ""}, "--vhost"}, BadOption{{"--no-such-option"}, "--no-such-option"},
        BadOption{{"serve", "--listen", "127.0.0.1"}, "--listen"},
        BadOption{{"serve", "--connections-max", "0"}, "--connections-max"}));

TEST(LoadOptions, PasscodeFileGivesTheFirstLine) {
  char path[] = "/tmp/sluice-load-passcode-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  FILE* f = fdopen(fd, "w");
  std::fputs("s3cret\nignored\n", f);
  std::fclose(f);
  const CommandLine cl = parse({"--passcode-file", path});
  std::remove(path);
  ASSERT_EQ(cl.action, CommandLine::Action::kLoad) << cl.message;
  EXPECT_EQ(cl.load.passcode, "s3cret");
  const CommandLine both = parse({"--passcode", "x", "--passcode-file", "/etc/hostname"});
  EXPECT_NE(both.message.find("--passcode-file"), std::string::npos) << both.message;
}

}  // namespace
}  // namespace sluice::load
