#!/usr/bin/ruby
# The fidelity scenario (tests/integration/client_fidelity_test.py) through Ruby's stomp gem
# (Debian ruby-stomp), its Stomp::Connection API.
#
# Usage: fidelity_ruby.rb HOST PORT LOGIN PASSCODE PREFIX VHOST
# Prints one JSON object, the transcript of what was observed, on stdout (also when a step
# fails: that step's "error" says why). Every wait is bounded; a watchdog thread ends the
# program after WATCHDOG_S with what it has.
#
# The gem's own API throughout: every frame type takes a receipt header, NACK included. It
# sends and counts heart-beats itself once they are negotiated (hbsend_count; hbrecv_count
# counts the beats its receive ticker reads while the program is not reading, as in the idle
# step). Stomp::Connection#receive blocks without a bound: each call is wrapped in
# Timeout.timeout. A refused CONNECT raises nothing: connection_frame is the ERROR.

require 'json'
require 'timeout'
require 'stomp'

WATCHDOG_S = 75
RECEIPT_TIMEOUT_S = 10
QUIET_S = 3 # (3) how long bodies may arrive on -b
IDLE_S = 10 # (5)
HEART_BEAT = '2000,2000'

host, port, login, passcode, prefix, vhost = ARGV
port = Integer(port)
qa = "/queue/#{prefix}-a"
qb = "/queue/#{prefix}-b"
# "timing": heart-beat counts and step durations (not compared: they vary run to run).
$out = { 'library' => "ruby-stomp #{Stomp::Version::STRING}", 'timing' => { 'seconds' => {} } }
$step = 'start'
$print_lock = Mutex.new
$printed = false

def emit(code)
  $print_lock.synchronize do
    unless $printed
      $printed = true
      $stdout.puts JSON.generate($out)
      $stdout.flush
    end
  end
  exit!(code)
end

Thread.new do
  sleep WATCHDOG_S
  $out['watchdog'] = "#{WATCHDOG_S} s passed, in step #{$step}"
  emit(3)
end

def run(name)
  $step = name
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  begin
    yield
    true
  rescue Exception => e # rubocop:disable Lint/RescueException - recorded in the transcript
    ($out[name] ||= {})['error'] = "#{e.class}: #{e.message}"
    false
  ensure
    $out['timing']['seconds'][name] =
      (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).round(2)
  end
end

def connection(host, port, login, passcode, vhost)
  Stomp::Connection.new(
    hosts: [{ login: login, passcode: passcode, host: host, port: port, ssl: false }],
    reliable: false, connect_timeout: 10, connread_timeout: 10, parse_timeout: 10,
    connect_headers: { 'accept-version' => '1.2', 'host' => vhost, 'heart-beat' => HEART_BEAT }
  )
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# The next frame within timeout_s, :timeout, or :closed (EOF).
def recv(c, timeout_s)
  return :timeout if timeout_s <= 0
  f = Timeout.timeout(timeout_s) { c.receive }
  f.nil? ? :closed : f
rescue Timeout::Error
  :timeout
end

# Frames until every receipt id in receipts and nmsg MESSAGEs arrived, an ERROR, or the
# timeout: [receipt ids in arrival order, MESSAGE frames, other frames].
def collect(c, receipts, nmsg, timeout_s)
  got_r = []
  got_m = []
  other = []
  deadline = now + timeout_s
  until (receipts - got_r).empty? && got_m.size >= nmsg
    f = recv(c, deadline - now)
    break if f == :timeout
    if f == :closed
      other << { 'command' => '(closed)' }
      break
    end
    case f.command
    when 'RECEIPT' then got_r << f.headers['receipt-id']
    when 'MESSAGE' then got_m << f
    else
      other << { 'command' => f.command, 'message' => f.headers['message'], 'body' => f.body }
      break
    end
  end
  [got_r, got_m, other]
end

c = nil
# (1) connect.
ok = run('connect') do
  c = connection(host, port, login, passcode, vhost)
  cf = c.connection_frame
  raise "connect: got #{cf.command} #{cf.headers.inspect}" unless cf.command == 'CONNECTED'
  h = cf.headers
  $out['connect'] = { 'header_names' => h.keys.sort, 'version' => h['version'],
                      'heart-beat' => h['heart-beat'], 'server' => h['server'] }
end
emit(0) unless ok

# (2) client-individual subscription, two receipted SENDs, ACK the first, NACK the second.
run('ack_nack') do
  r = $out['ack_nack'] = {}
  c.subscribe(qa, { id: 'sub-a', ack: 'client-individual', receipt: 'a-sub' })
  c.publish(qa, 'a-1', { receipt: 'a-send-1' })
  c.publish(qa, 'a-2', { receipt: 'a-send-2' })
  rids, msgs, other = collect(c, %w[a-sub a-send-1 a-send-2], 2, RECEIPT_TIMEOUT_S)
  r['receipts'] = rids
  r['bodies'] = msgs.map(&:body)
  r['other'] = other
  by_body = msgs.to_h { |m| [m.body, m] }
  c.ack(by_body['a-1'].headers['ack'], { receipt: 'a-ack' }) if by_body['a-1']
  c.nack(by_body['a-2'].headers['ack'], { receipt: 'a-nack' }) if by_body['a-2']
  # NACK requeues (RabbitMQ's default): a-2 comes again, redelivered.
  rids, msgs, other = collect(c, %w[a-ack a-nack], 1, RECEIPT_TIMEOUT_S)
  r['ack_nack_receipts'] = rids
  r['redelivered'] = msgs.map { |m| [m.body, m.headers['redelivered']] }
  r['other'] += other
  msgs.each { |m| c.ack(m.headers['ack']) }
end

# (3) transactions: aborted then committed; only the committed body arrives.
run('transactions') do
  r = $out['transactions'] = {}
  c.begin('tx-1', { receipt: 'tx-begin-1' })
  c.publish(qb, 'aborted', { transaction: 'tx-1' })
  c.abort('tx-1', { receipt: 'tx-abort' })
  c.begin('tx-2', { receipt: 'tx-begin-2' })
  c.publish(qb, 'committed', { transaction: 'tx-2' })
  c.commit('tx-2', { receipt: 'tx-commit' })
  rids, _, other = collect(c, %w[tx-begin-1 tx-abort tx-begin-2 tx-commit], 0, RECEIPT_TIMEOUT_S)
  c.subscribe(qb, { id: 'sub-b', ack: 'auto', receipt: 'b-sub' })
  rids2, msgs, other2 = collect(c, %w[b-sub], 99, QUIET_S)
  r['receipts'] = rids + rids2
  r['bodies'] = msgs.map(&:body)
  r['other'] = other + other2
end

# (4) UNSUBSCRIBE both subscriptions, with receipts.
run('unsubscribe') do
  c.unsubscribe(qa, { id: 'sub-a', receipt: 'unsub-a' })
  c.unsubscribe(qb, { id: 'sub-b', receipt: 'unsub-b' })
  rids, _, other = collect(c, %w[unsub-a unsub-b], 0, RECEIPT_TIMEOUT_S)
  $out['unsubscribe'] = { 'receipts' => rids, 'other' => other }
end

# (5) idle with heart-beats both ways (the gem's tickers), then a receipted SEND.
run('heart_beats') do
  r = $out['heart_beats'] = {}
  r['negotiated_ms'] = [c.hbsend_interval, c.hbrecv_interval].map(&:round) # send, receive
  rec0 = c.hbrecv_count
  sent0 = c.hbsend_count
  sleep IDLE_S
  $out['timing']['beats_received'] = c.hbrecv_count - rec0
  $out['timing']['beats_sent'] = c.hbsend_count - sent0
  r['connected_after'] = c.open?
  c.publish(qa, 'after-idle', { receipt: 'idle-send' })
  rids, _, other = collect(c, %w[idle-send], 0, RECEIPT_TIMEOUT_S)
  r['receipts'] = rids
  r['other'] = other
end

# (8) DISCONNECT with a receipt: the gem reads the RECEIPT itself, then closes the socket.
run('disconnect') do
  Timeout.timeout(RECEIPT_TIMEOUT_S) { c.disconnect({ receipt: 'disc' }) }
  f = c.disconnect_receipt
  $out['disconnect'] = { 'receipts' => f && f.command == 'RECEIPT' ? [f.headers['receipt-id']] : [],
                         'other' => f && f.command != 'RECEIPT' ? [f.command] : [] }
end

# (6) a fresh session: a receipted SEND to an invalid destination.
run('invalid_destination') do
  r = $out['invalid_destination'] = {}
  c2 = connection(host, port, login, passcode, vhost)
  begin
    c2.publish('/invalid-dest/x', 'x', { receipt: 'inv-send' })
    frames = []
    deadline = now + RECEIPT_TIMEOUT_S
    loop do
      f = recv(c2, deadline - now)
      if f.is_a?(Symbol)
        frames << "(#{f})"
        break
      end
      frames << f.command
      next unless f.command == 'ERROR'

      r['message'] = f.headers['message']
      r['body'] = f.body
      r['receipt-id'] = f.headers['receipt-id']
      r['receipt_id_matches'] = f.headers['receipt-id'] == 'inv-send'
      break
    end
    r['frames'] = frames
  ensure
    begin
      c2.disconnect
    rescue StandardError
      nil
    end
  end
end

# (7) a wrong passcode and an unknown vhost: each fails at connect.
bad_connects = [['bad_passcode', "wrong-#{passcode}", vhost], ['bad_vhost', passcode, 'no-such-vhost']]
bad_connects.each do |name, pw, vh|
  run(name) do
    r = $out[name] = {}
    c3 = nil
    begin
      c3 = connection(host, port, login, pw, vh)
      cf = c3.connection_frame
      r['failed_at_connect'] = cf.nil? || cf.command != 'CONNECTED'
      r['frame'] = cf&.command
      r['message'] = cf&.headers&.fetch('message', nil)
      r['body'] = cf&.body
    rescue StandardError => e
      r['failed_at_connect'] = true
      r['raised'] = e.class.to_s
    ensure
      begin
        c3&.disconnect
      rescue StandardError
        nil
      end
    end
  end
end

emit(0)
