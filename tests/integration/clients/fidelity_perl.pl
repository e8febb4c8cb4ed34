#!/usr/bin/perl
# The fidelity scenario (tests/integration/client_fidelity_test.py) through Perl's Net::Stomp
# (Debian libnet-stomp-perl).
#
# Usage: fidelity_perl.pl HOST PORT LOGIN PASSCODE PREFIX VHOST
# Prints one JSON object, the transcript of what was observed, on stdout (also when a step
# fails: that step's "error" says why). Every wait is bounded; an alarm ends the program after
# WATCHDOG_S with what it has.
#
# Net::Stomp's API where it has the call: connect, subscribe, unsubscribe, send, ack, nack,
# receive_frame (always with a timeout), each frame given extra headers (receipt, id) as its
# API allows. Where it lacks one, its lower-level send_frame with a Net::Stomp::Frame:
#   - BEGIN, COMMIT, ABORT: Net::Stomp has no such calls (only send_transactional, which
#     commits or aborts on its own and asks no receipts of them);
#   - DISCONNECT with a receipt: its disconnect sends a bare DISCONNECT and closes at once;
# and send with an explicit receipt header rather than send_with_receipt, which names the
#   receipt after the (random) session id and reads exactly one frame as the receipt (a
#   MESSAGE of the subscription would be taken for it).
# Net::Stomp does no heart-beating: it neither sends beats nor reads them as such (its parser
# skips the EOLs before a frame). This program sends the client's beats itself, an EOL on the
# library's socket every BEAT_S while it waits, and counts the server's beats in the idle step
# by peeking at the socket (MSG_PEEK: the bytes stay for the library to skip).
# On a closed connection Net::Stomp reconnects by itself: the program never calls it on a
# socket the server closed.

use strict;
use warnings;
use JSON::PP;
use Net::Stomp;
use Net::Stomp::Frame;
use POSIX ();
use Socket qw(MSG_PEEK MSG_DONTWAIT);
use Time::HiRes qw(time sleep);

use constant WATCHDOG_S => 75;
use constant RECEIPT_TIMEOUT_S => 10;
use constant QUIET_S => 3;    # (3) how long bodies may arrive on -b
use constant IDLE_S => 10;    # (5)
use constant BEAT_S => 0.5;   # the client's beats: well inside the negotiated 2000 ms
use constant HEART_BEAT => '2000,2000';

my ($host, $port, $login, $passcode, $prefix, $vhost) = @ARGV;
my $qa = "/queue/$prefix-a";
my $qb = "/queue/$prefix-b";
# "timing": heart-beat counts and step durations (not compared: they vary run to run).
my %out = (library => "Net::Stomp $Net::Stomp::VERSION", timing => {seconds => {}});
my $step = 'start';
my $json = JSON::PP->new->canonical->allow_nonref;
my $beats_sent = 0;

sub emit {
    my ($code) = @_;
    print $json->encode(\%out), "\n";
    STDOUT->flush;
    POSIX::_exit($code);
}

$SIG{ALRM} = sub {
    $out{watchdog} = WATCHDOG_S . " s passed, in step $step";
    emit(3);
};
alarm(WATCHDOG_S);

sub run_step {
    my ($name, $fn) = @_;
    $step = $name;
    my $t0 = time;
    my $ok = eval { $fn->(); 1 };
    unless ($ok) {
        my $e = $@;
        $e =~ s/\s+\z//;
        $out{$name}{error} = $e;
    }
    $out{timing}{seconds}{$name} = 0 + sprintf('%.2f', time - $t0);
    return $ok;
}

sub open_socket {
    my ($s) = @_;
    return $s->socket && $s->socket->opened;
}

sub connection {
    my ($pw, $vh) = @_;
    my $s = Net::Stomp->new({hostname => $host, port => $port, timeout => 10,
                             initial_reconnect_attempts => 1, reconnect_attempts => 1,
                             connect_delay => 0});
    my $f = $s->connect({login => $login, passcode => $pw, 'accept-version' => '1.2',
                         host => $vh, 'heart-beat' => HEART_BEAT});
    $s->{fidelity_last_beat} = time;
    return ($s, $f);
}

# The client's heart-beat, when one is due.
sub beat {
    my ($s) = @_;
    return unless open_socket($s);
    return if time - $s->{fidelity_last_beat} < BEAT_S;
    local $SIG{PIPE} = 'IGNORE';
    if (defined $s->socket->syswrite("\n")) {
        ++$beats_sent;
    }
    $s->{fidelity_last_beat} = time;
}

# The next frame within $timeout seconds, 'timeout' or 'closed'; beats while it waits.
sub recv_frame {
    my ($s, $timeout) = @_;
    my $deadline = time + $timeout;
    while (1) {
        return 'closed' unless open_socket($s);
        beat($s);
        my $left = $deadline - time;
        return 'timeout' if $left <= 0;
        my $f = $s->receive_frame({timeout => $left < 0.25 ? $left : 0.25});
        return $f if $f;
    }
}

# Frames until every receipt id in @$receipts and $nmsg MESSAGEs arrived, an ERROR, or the
# timeout: ([receipt ids in arrival order], [MESSAGE frames], [other frames]).
sub collect {
    my ($s, $receipts, $nmsg, $timeout) = @_;
    my (@r, @m, @other);
    my $deadline = time + $timeout;
    while (1) {
        my %got = map { $_ => 1 } @r;
        last if !(grep { !$got{$_} } @$receipts) && @m >= $nmsg;
        my $f = recv_frame($s, $deadline - time);
        last if !ref $f && $f eq 'timeout';
        if (!ref $f) {
            push @other, {command => '(closed)'};
            last;
        }
        if ($f->command eq 'RECEIPT') {
            push @r, $f->headers->{'receipt-id'};
        } elsif ($f->command eq 'MESSAGE') {
            push @m, $f;
        } else {
            push @other, {command => $f->command, message => $f->headers->{message},
                          body => $f->body};
            last;
        }
    }
    return (\@r, \@m, \@other);
}

sub frame {
    my ($command, %headers) = @_;
    return Net::Stomp::Frame->new({command => $command, headers => \%headers});
}

sub close_socket {
    my ($s) = @_;
    $s->socket->close if open_socket($s);
}

my $s;
# (1) connect.
run_step('connect', sub {
    my $f;
    ($s, $f) = connection($passcode, $vhost);
    die "connect: got " . ($f ? $f->command : 'nothing') . "\n"
        unless $f && $f->command eq 'CONNECTED';
    my $h = $f->headers;
    $out{connect} = {header_names => [sort keys %$h], version => $h->{version},
                     'heart-beat' => $h->{'heart-beat'}, server => $h->{server}};
}) or emit(0);

# (2) client-individual subscription, two receipted SENDs, ACK the first, NACK the second.
run_step('ack_nack', sub {
    my $r = $out{ack_nack} = {};
    $s->subscribe({destination => $qa, id => 'sub-a', ack => 'client-individual',
                   receipt => 'a-sub'});
    $s->send({destination => $qa, body => 'a-1', receipt => 'a-send-1'});
    $s->send({destination => $qa, body => 'a-2', receipt => 'a-send-2'});
    my ($rids, $msgs, $other) = collect($s, [qw(a-sub a-send-1 a-send-2)], 2,
                                        RECEIPT_TIMEOUT_S);
    $r->{receipts} = $rids;
    $r->{bodies} = [map { $_->body } @$msgs];
    $r->{other} = $other;
    my %by_body = map { $_->body => $_ } @$msgs;
    # STOMP 1.2 names the message by its ack header (id); Net::Stomp adds message-id.
    $s->ack({frame => $by_body{'a-1'}, id => $by_body{'a-1'}->headers->{ack},
             receipt => 'a-ack'}) if $by_body{'a-1'};
    $s->nack({frame => $by_body{'a-2'}, id => $by_body{'a-2'}->headers->{ack},
              receipt => 'a-nack'}) if $by_body{'a-2'};
    # NACK requeues (RabbitMQ's default): a-2 comes again, redelivered.
    ($rids, $msgs, $other) = collect($s, [qw(a-ack a-nack)], 1, RECEIPT_TIMEOUT_S);
    $r->{ack_nack_receipts} = $rids;
    $r->{redelivered} = [map { [$_->body, $_->headers->{redelivered}] } @$msgs];
    push @{$r->{other}}, @$other;
    $s->ack({frame => $_, id => $_->headers->{ack}}) for @$msgs;
});

# (3) transactions: aborted then committed; only the committed body arrives.
run_step('transactions', sub {
    my $r = $out{transactions} = {};
    $s->send_frame(frame('BEGIN', transaction => 'tx-1', receipt => 'tx-begin-1'));
    $s->send({destination => $qb, body => 'aborted', transaction => 'tx-1'});
    $s->send_frame(frame('ABORT', transaction => 'tx-1', receipt => 'tx-abort'));
    $s->send_frame(frame('BEGIN', transaction => 'tx-2', receipt => 'tx-begin-2'));
    $s->send({destination => $qb, body => 'committed', transaction => 'tx-2'});
    $s->send_frame(frame('COMMIT', transaction => 'tx-2', receipt => 'tx-commit'));
    my ($rids, undef, $other) = collect($s, [qw(tx-begin-1 tx-abort tx-begin-2 tx-commit)], 0,
                                        RECEIPT_TIMEOUT_S);
    $s->subscribe({destination => $qb, id => 'sub-b', ack => 'auto', receipt => 'b-sub'});
    my ($rids2, $msgs, $other2) = collect($s, ['b-sub'], 99, QUIET_S);
    $r->{receipts} = [@$rids, @$rids2];
    $r->{bodies} = [map { $_->body } @$msgs];
    $r->{other} = [@$other, @$other2];
});

# (4) UNSUBSCRIBE both subscriptions, with receipts.
run_step('unsubscribe', sub {
    $s->unsubscribe({id => 'sub-a', receipt => 'unsub-a'});
    $s->unsubscribe({id => 'sub-b', receipt => 'unsub-b'});
    my ($rids, undef, $other) = collect($s, [qw(unsub-a unsub-b)], 0, RECEIPT_TIMEOUT_S);
    $out{unsubscribe} = {receipts => $rids, other => $other};
});

# (5) idle with heart-beats both ways (the client's sent here), then a receipted SEND.
run_step('heart_beats', sub {
    my $r = $out{heart_beats} = {};
    my $sent0 = $beats_sent;
    my $end = time + IDLE_S;
    while (time < $end) {
        beat($s);
        sleep(0.05);
    }
    my $buf = '';
    $s->socket->recv($buf, 65536, MSG_PEEK | MSG_DONTWAIT);
    $buf //= '';
    $out{timing}{beats_received} = ($buf =~ tr/\n//);
    $out{timing}{beats_sent} = $beats_sent - $sent0;
    $r->{only_beats_while_idle} = ($buf =~ /\A[\r\n]*\z/) ? JSON::PP::true : JSON::PP::false;
    $r->{connected_after} = open_socket($s) && $s->socket->connected ? JSON::PP::true
                                                                      : JSON::PP::false;
    $s->send({destination => $qa, body => 'after-idle', receipt => 'idle-send'});
    my ($rids, undef, $other) = collect($s, ['idle-send'], 0, RECEIPT_TIMEOUT_S);
    $r->{receipts} = $rids;
    $r->{other} = $other;
});

# (8) DISCONNECT with a receipt (send_frame: see the top), then close.
run_step('disconnect', sub {
    $s->send_frame(frame('DISCONNECT', receipt => 'disc'));
    my ($rids, undef, $other) = collect($s, ['disc'], 0, RECEIPT_TIMEOUT_S);
    $out{disconnect} = {receipts => $rids, other => $other};
    close_socket($s);
});

# (6) a fresh session: a receipted SEND to an invalid destination.
run_step('invalid_destination', sub {
    my $r = $out{invalid_destination} = {};
    my ($s2, $f) = connection($passcode, $vhost);
    die "connect: got " . ($f ? $f->command : 'nothing') . "\n"
        unless $f && $f->command eq 'CONNECTED';
    $s2->send({destination => '/invalid-dest/x', body => 'x', receipt => 'inv-send'});
    my @frames;
    my $deadline = time + RECEIPT_TIMEOUT_S;
    while (1) {
        my $g = recv_frame($s2, $deadline - time);
        if (!ref $g) {
            push @frames, "($g)";
            last;
        }
        push @frames, $g->command;
        next unless $g->command eq 'ERROR';
        my $rid = $g->headers->{'receipt-id'};
        $r->{message} = $g->headers->{message};
        $r->{body} = $g->body;
        $r->{'receipt-id'} = $rid;
        $r->{receipt_id_matches} = defined $rid && $rid eq 'inv-send' ? JSON::PP::true
                                                                       : JSON::PP::false;
        last;
    }
    $r->{frames} = \@frames;
    close_socket($s2);
});

# (7) a wrong passcode and an unknown vhost: each fails at connect.
for my $case (['bad_passcode', "wrong-$passcode", $vhost],
              ['bad_vhost', $passcode, 'no-such-vhost']) {
    my ($name, $pw, $vh) = @$case;
    run_step($name, sub {
        my $r = $out{$name} = {};
        my ($s3, $f) = connection($pw, $vh);
        $r->{failed_at_connect} = !($f && $f->command eq 'CONNECTED') ? JSON::PP::true
                                                                        : JSON::PP::false;
        $r->{frame} = $f ? $f->command : undef;
        $r->{message} = $f ? $f->headers->{message} : undef;
        $r->{body} = $f ? $f->body : undef;
        close_socket($s3);
    });
}

alarm(0);
emit(0);
