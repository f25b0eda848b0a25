# Supex runtime driver: the Ruby side of supex-bridge's private pipe protocol.
#
# The daemon runs this script as `ruby -e <this file>` (with SUPEX_RUBY as the
# interpreter) and keeps the process for as long as it lives. It is embedded in
# the binary with include_str!, so it needs nothing on disk.
#
# == Protocol (version 1): one JSON object per line in each direction
#
# Requests arrive on the child's stdin (fd 0). Replies go out on fd 3, a pipe of
# their own, never on stdout: user code may write to fd 1 directly
# (`system("echo hi")`, `$stdout.syswrite`), and whatever it prints outside an
# evaluation belongs to the console log, which the daemon reads from the
# child's stdout and stderr (both the same pipe).
#
# First line on fd 3, once the driver is ready:
#   {"ready":true,"protocol":1,"pid":123,"ruby_version":"3.1.2","ruby_description":"ruby 3.1.2p20 ..."}
#
# Requests ("id" is any integer the daemon picks; replies carry it back):
#   {"id":1,"op":"eval","code":"1+1","scope":"fresh","file":"(eval)","line":1,"show":"to_s"}
#       scope "fresh": a new binding whose self is `main` and whose constants
#                      and methods land on Object; locals do not survive the call.
#       scope "repl":  TOPLEVEL_BINDING, shared by every REPL evaluation, so
#                      locals carry over as in a Ruby console.
#       file/line:     name and first line number for backtraces (optional).
#       show "to_s" | "inspect": how the value is turned into `value`.
#     Evaluations run one at a time, in the order they arrived, on the main
#     thread. Everything the code prints, at the Ruby level or straight to fds 1
#     and 2 (subprocesses included), is captured and returned as `output`:
#     fds 1 and 2 point at a pipe that a thread of the driver drains as it
#     fills, keeping the first OUTPUT_LIMIT bytes and counting the rest.
#     Each one starts with working standard streams, whatever the last one did
#     to them (closed STDOUT/STDERR, reassigned $stdout/$stderr).
#   {"id":2,"op":"complete","code":"def f(x)"}
#     Whether the code is a complete expression (for continuation prompts).
#     Answered at once by the reader thread, even while an evaluation runs.
#   {"id":3,"op":"ping"}
#     Answered at once by the reader thread.
#
# Replies:
#   {"id":1,"ok":true,"value":"2","output":""}
#   {"id":1,"ok":false,"error":{"class":"ZeroDivisionError","message":"divided by 0",
#                               "backtrace":["(eval):1:in `/'", ...]},"output":"..."}
#   {"id":2,"ok":true,"complete":false}
#   {"id":3,"ok":true}
#   {"id":null,"ok":false,"error":{"class":"ProtocolError",...}}   (unreadable request)
#
# Every string in a reply is valid UTF-8 (invalid bytes replaced with U+FFFD);
# `output` and an exception's message are cut at 1 MiB, `value` at 4 MiB, a
# class name and each backtrace line at 4 KiB, with a note saying so: the
# daemon drops a reply line longer than 64 MiB (and fails its evaluation).
#
# == Lifetime
#
# A reader thread owns stdin. At EOF (the daemon closed the pipe or died, even
# by SIGKILL) it calls exit! at once: Ruby's timer thread switches threads even
# during a busy `loop {}`, so a stuck evaluation does not keep the process alive.
#
# == Trying it by hand
#
#   ruby bins/supex-bridge/src/runtime/driver.rb 3>&1
#   {"id":1,"op":"eval","code":"puts :hi; 6*7","scope":"fresh"}
#
# Nothing below defines a top-level local variable: the REPL scope is the
# top-level binding, and it must start empty.

require 'json'

# The body of a fresh evaluation scope: `binding` inside a method defined at the
# top level has `main` as self and Object as the lexical class, and no locals.
# The method is removed right away; the UnboundMethod keeps it callable.
def __supex_binding__
  binding
end

module SupexDriver
  PROTOCOL = 1
  OUTPUT_LIMIT = 1 << 20
  VALUE_LIMIT = 4 << 20
  MESSAGE_LIMIT = 1 << 20
  NAME_LIMIT = 4 << 10
  CAPTURE_CHUNK = 1 << 16
  # Reads that empty the largest pipe an unprivileged process can have (1 MiB).
  CAPTURE_READS = 17
  BACKTRACE_LIMIT = 20
  FRESH_BINDING = Object.instance_method(:__supex_binding__)
  Object.send(:remove_method, :__supex_binding__)
  DRIVER_FILE = __FILE__
  # Messages of syntax errors that only mean "there is more to come".
  INCOMPLETE = /unexpected end-of-input|unexpected \$end|meets end of file|anywhere before EOF/
  # The compiler whose messages INCOMPLETE knows: parse.y's (Ruby 3.4 compiles
  # with Prism by default and keeps parse.y's as compile_parsey).
  COMPILE = RubyVM::InstructionSequence.respond_to?(:compile_parsey) ? :compile_parsey : :compile

  # Drops warnings on a thread that asked for quiet: `complete` compiles on the
  # reader thread while an evaluation may run with its stderr captured.
  module QuietWarnings
    def warn(*args, **kwargs)
      return if Thread.current[:supex_quiet]

      super
    end
  end

  class << self
    def run
      setup_io
      Warning.singleton_class.prepend(QuietWarnings)
      @queue = Queue.new
      reply(ready: true, protocol: PROTOCOL, pid: Process.pid,
            ruby_version: RUBY_VERSION, ruby_description: RUBY_DESCRIPTION)
      reader = Thread.new { read_requests }
      reader.name = 'supex-driver-reader'
      reader.report_on_exception = false
      loop { evaluate(@queue.pop) }
    end

    private

    def setup_io
      # Requests are ours alone: user code that reads STDIN gets /dev/null, and
      # Kernel#gets (which reads ARGV's files first) gets nothing either.
      @requests = STDIN.dup
      STDIN.reopen(File::NULL)
      ARGV.clear
      $0 = 'supex-runtime'
      @replies = IO.for_fd(3, 'w', autoclose: false)
      @replies.close_on_exec = true # subprocesses must not hold the reply pipe open
      @replies.sync = true
      @reply_lock = Mutex.new
      # IO#reopen copies the sync flag of its source, so every IO that STDOUT or
      # STDERR is reopened to is unbuffered too: output keeps its order.
      @console_out = STDOUT.dup
      @console_err = STDERR.dup
      [STDOUT, STDERR, @console_out, @console_err].each { |io| io.sync = true }
      Encoding.default_external = Encoding::UTF_8 if Encoding.default_external == Encoding::US_ASCII
      # Captured output goes through a pipe that a thread of ours keeps
      # draining, so a chatty evaluation never blocks on a full pipe, keeps at
      # most OUTPUT_LIMIT bytes (the rest is counted, then dropped) and
      # writes nothing to disk. A pipe also has no path or file mode for
      # `STDOUT.reopen(path)` to trip over or show in its error messages.
      @capture, @capture_in = IO.pipe
      [@capture, @capture_in].each(&:binmode)
      @capture_in.sync = true
      @captured = String.new(encoding: Encoding::BINARY)
      @captured_size = 0
      @capture_lock = Mutex.new
      drainer = Thread.new { drain_capture }
      drainer.name = 'supex-driver-capture'
      drainer.report_on_exception = false
    end

    def read_requests
      while (line = @requests.gets)
        handle_line(line)
      end
    ensure
      # EOF: the daemon is gone or wants us gone. exit! skips at_exit handlers
      # and ensure blocks of whatever user code is running.
      exit!(0)
    end

    def handle_line(line)
      request = JSON.parse(line)
      raise TypeError, 'a request must be a JSON object' unless request.is_a?(Hash)

      id = request['id']
      case request['op']
      when 'eval' then @queue << request
      when 'complete' then reply(id: id, ok: true, complete: complete?(request['code'].to_s))
      when 'ping' then reply(id: id, ok: true)
      else reply(id: id, ok: false, error: protocol_error("unknown op #{request['op'].inspect}"))
      end
    rescue StandardError => e
      reply(id: request.is_a?(Hash) ? request['id'] : nil, ok: false,
            error: protocol_error("#{e.class}: #{e.message}"))
    end

    def protocol_error(message)
      { class: 'ProtocolError', message: utf8(message), backtrace: [] }
    end

    # Compiled, not parsed with Ripper: Ripper keeps about 400 bytes of every
    # syntax error (Ruby 3.1), and each incomplete line typed is one.
    def complete?(code)
      Thread.current[:supex_quiet] = true
      RubyVM::InstructionSequence.public_send(COMPILE, code, '(complete)', '(complete)', 1)
      true
    rescue SyntaxError => e
      !INCOMPLETE.match?(e.message)
    ensure
      Thread.current[:supex_quiet] = false
    end

    def evaluate(request)
      code = request['code'].to_s
      file = (request['file'] || '(eval)').to_s
      line = Integer(request['line'] || 1)
      scope = request['scope'] == 'repl' ? TOPLEVEL_BINDING : FRESH_BINDING.bind_call(TOPLEVEL_BINDING.receiver)
      start_capture
      begin
        value = eval(code, scope, file, line) # rubocop:disable Security/Eval
        text = show(value, request['show'])
        result = { id: request['id'], ok: true, value: limit(utf8(text), VALUE_LIMIT) }
      rescue Exception => e # rubocop:disable Lint/RescueException
        # Everything, SystemExit and SyntaxError included: user code must not be
        # able to end the runtime by accident (exit! still does, on purpose).
        result = { id: request['id'], ok: false, error: describe(e) }
      ensure
        result ||= { id: request['id'], ok: false, error: protocol_error('evaluation was interrupted') }
        result[:output] = finish_capture
        reply(result)
      end
    end

    def show(value, how)
      text = how == 'inspect' ? value.inspect : value.to_s
      # A to_s that returns something else is what string interpolation shrugs off too.
      text.is_a?(String) ? text : Kernel.instance_method(:to_s).bind_call(value)
    rescue Exception => e # rubocop:disable Lint/RescueException
      "#<#{value.class} (#{how || 'to_s'} raised #{e.class})>"
    end

    def start_capture
      standard_streams
      restore(STDOUT, @capture_in)
      restore(STDERR, @capture_in)
    end

    def finish_capture
      [$stdout, $stderr, STDOUT, STDERR].each { |io| io.flush rescue nil } # rubocop:disable Style/RescueModifier
      standard_streams
      restore(STDOUT, @console_out)
      restore(STDERR, @console_err)
      data, size = @capture_lock.synchronize do
        # What the evaluation wrote is in the pipe by now (a pipe holds at
        # most 1 MiB); more is a background process still writing.
        CAPTURE_READS.times { break unless take_captured }
        taken = [@captured, @captured_size]
        @captured = String.new(encoding: Encoding::BINARY)
        @captured_size = 0
        taken
      end
      text = utf8(data)
      text << "\n[output truncated: #{size} bytes in all, #{OUTPUT_LIMIT} shown]\n" if size > OUTPUT_LIMIT
      text
    end

    # The capture thread: reads the pipe as it fills, under the lock, so that
    # finish_capture never misses a chunk read but not yet kept.
    def drain_capture
      loop do
        IO.select([@capture])
        @capture_lock.synchronize { take_captured }
      end
    end

    # Reads one chunk from the capture pipe without blocking; keeps what fits
    # under OUTPUT_LIMIT and counts the rest. Whether there was anything.
    def take_captured
      chunk = @capture.read_nonblock(CAPTURE_CHUNK, exception: false)
      return false unless chunk.is_a?(String)

      @captured_size += chunk.bytesize
      room = OUTPUT_LIMIT - @captured.bytesize
      @captured << (chunk.bytesize <= room ? chunk : chunk.byteslice(0, room)) if room.positive?
      true
    end

    # Puts back what an evaluation may have broken for every later one (and
    # for every other client): `$stdout`/`$stderr` reassigned, or STDOUT and
    # STDERR closed. A closed IO cannot be reopened, but Ruby leaves fds 0-2
    # open when it closes their IO objects, so a new IO on the same fd takes
    # the constant's place; the fd is then pointed at the capture or the
    # console like any other time.
    def standard_streams
      { STDOUT: 1, STDERR: 2 }.each do |name, fd|
        stream = Object.const_get(name)
        next if stream.is_a?(IO) && !stream.closed?

        replacement = IO.for_fd(fd, 'w', autoclose: false)
        replacement.sync = true
        Object.send(:remove_const, name)
        Object.const_set(name, replacement)
      rescue StandardError
        nil # the fd itself is gone (closed below Ruby): that stream's output is lost, not the runtime
      end
      $stdout = STDOUT
      $stderr = STDERR
    rescue StandardError
      nil
    end

    def restore(io, original)
      io.reopen(original)
    rescue StandardError
      nil
    end

    def describe(error)
      {
        class: limit(utf8(error.class.name || error.class.inspect), NAME_LIMIT),
        message: limit(utf8(message_of(error)), MESSAGE_LIMIT),
        backtrace: clean_backtrace(error.backtrace)
      }
    end

    def message_of(error)
      error.message.to_s
    rescue Exception # rubocop:disable Lint/RescueException
      "(#{error.class}#message raised)"
    end

    def clean_backtrace(backtrace)
      return [] unless backtrace.is_a?(Array)

      backtrace
        .reject { |frame| frame.start_with?("#{DRIVER_FILE}:") }
        .first(BACKTRACE_LIMIT)
        .map { |frame| limit(utf8(frame.to_s.sub(/(?:Object#)?__supex_binding__/, '<main>')), NAME_LIMIT) }
    end

    def limit(text, max)
      return text if text.bytesize <= max

      text.byteslice(0, max).scrub('') + "... [truncated: #{text.bytesize} bytes in all]"
    end

    def utf8(value)
      text = value.to_s
      return text if text.encoding == Encoding::UTF_8 && text.valid_encoding?

      if [Encoding::UTF_8, Encoding::BINARY, Encoding::US_ASCII].include?(text.encoding)
        text.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD")
      else
        text.encode(Encoding::UTF_8, invalid: :replace, undef: :replace, replace: "\uFFFD")
      end
    rescue StandardError
      text.dup.force_encoding(Encoding::UTF_8).scrub("\uFFFD")
    end

    def reply(message)
      line = JSON.generate(message)
      @reply_lock.synchronize { @replies.write(line, "\n") }
    end
  end
end

SupexDriver.run
