#!/bin/sh
# A scripted stand-in for a coding agent, for ralph-server's tests.
# Usage: fake-agent.sh [PROMPT_FILE | --prompt PROMPT]  (without either, the
# prompt is read from stdin). A prompt that points at a file ("Read the file
# PATH and follow it as your prompt.") is read from that file, as an agent
# would; the prompt it ends up with is saved in $RALPH_TASK_DIR/prompt-seen-<iteration>.
# What it does comes from the first word of $RALPH_TASK_DIR/fake-mode (default
# "pass"; fake-mode-<story id> for one story), read at each start, so a test
# can change it between iterations:
#   pass         mark the current story passing; print the completion marker
#                when no story is left failing
#   claim        print the marker without marking anything (a false claim)
#   quiet-pass   mark the story passing, print nothing of its own, no marker
#   slow N       print a line every 0.1 s for N lines, then pass
#   ticks N      print "tick <ns since epoch>" every 20 ms, N times, then pass
#   flood N      print N lines of 100 bytes as fast as it can, then pass
#   bursts N     the same, 100 lines every 0.2 s
#   paced N      the same in bursts of 100, each followed by creating
#                $RALPH_TASK_DIR/burst and waiting until the test removes it
#   interactive  ask for a line on its terminal, echo it, then pass
#   gate         print "waiting at the gate", wait while $RALPH_TASK_DIR/gate
#                exists, then pass
#   wide N       print N lines of 8000 bytes (paced: 50 every 20 ms), then as gate
#   stubborn     ignore SIGTERM (only SIGKILL ends it) and print a line every 0.1 s
#   careful      print a line every 0.1 s; on SIGTERM, say "saving my work" and
#                take 1 s to exit, as an agent saving its state would
#   fds          print "fd N -> TARGET" for each descriptor it holds, then pass
#   fifo         replace prd.json by a FIFO nobody writes, then exit 0
#   claims N     print N lines holding the completion marker as fast as it
#                can, without marking anything; how long that took (ns) is
#                saved in $RALPH_TASK_DIR/claims-ns
#   fail         exit 1
# While $RALPH_TASK_DIR/hold exists, it waits before doing anything.
# Stories are marked passing with sed: prd.json must keep each story on one line.
set -u
prd="$RALPH_TASK_DIR/prd.json"
if [ $# -ge 2 ] && [ "$1" = "--prompt" ]; then
    prompt=$2
elif [ $# -ge 1 ]; then
    prompt=$(cat "$1")
else
    prompt=$(cat)
fi
file=$(printf '%s\n' "$prompt" | sed -n 's/.*Read the file \(.*\) and follow it as your prompt\..*/\1/p' | head -n 1)
[ -n "$file" ] && prompt=$(cat "$file")
printf '%s' "$prompt" > "$RALPH_TASK_DIR/prompt-seen-$RALPH_ITERATION"
# A test that must subscribe before the agent speaks holds it with this file.
while [ -f "$RALPH_TASK_DIR/hold" ]; do sleep 0.02; done
mode=pass
count=0
[ -f "$RALPH_TASK_DIR/fake-mode" ] && read -r mode count < "$RALPH_TASK_DIR/fake-mode"
# A mode for one story only: fake-mode-<story id>.
[ -f "$RALPH_TASK_DIR/fake-mode-$RALPH_STORY_ID" ] && read -r mode count < "$RALPH_TASK_DIR/fake-mode-$RALPH_STORY_ID"
echo "fake agent: iteration $RALPH_ITERATION, story $RALPH_STORY_ID, mode $mode, in $(pwd)"
echo "prompt starts: $(printf '%s\n' "$prompt" | head -n 1)"

mark() {
    sed -i "/\"id\": *\"$RALPH_STORY_ID\"/ s/\"passes\": *false/\"passes\": true/" "$prd"
}
pass() {
    mark
    echo "marked $RALPH_STORY_ID"
    if ! grep -q '"passes": *false' "$prd"; then
        printf 'all done: <promise>COMPLETE</promise>\n'
    fi
}

case "$mode" in
    pass) pass ;;
    claim) echo "<promise>COMPLETE</promise>" ;;
    quiet-pass) mark ;;
    slow)
        i=0
        while [ "$i" -lt "${count:-10}" ]; do echo "working $i"; i=$((i + 1)); sleep 0.1; done
        pass ;;
    ticks)
        i=0
        while [ "$i" -lt "${count:-50}" ]; do echo "tick $(date +%s%N)"; i=$((i + 1)); sleep 0.02; done
        pass ;;
    flood)
        i=0
        pad=$(printf '%090d' 0)
        while [ "$i" -lt "${count:-1000}" ]; do echo "flood $i $pad"; i=$((i + 1)); done
        pass ;;
    bursts)
        i=0
        pad=$(printf '%090d' 0)
        while [ "$i" -lt "${count:-1000}" ]; do
            echo "flood $i $pad"; i=$((i + 1))
            [ $((i % 100)) = 0 ] && sleep 0.2
        done
        pass ;;
    paced)
        i=0
        pad=$(printf '%090d' 0)
        while [ "$i" -lt "${count:-1000}" ]; do
            echo "flood $i $pad"; i=$((i + 1))
            if [ $((i % 100)) = 0 ]; then
                : > "$RALPH_TASK_DIR/burst"
                while [ -f "$RALPH_TASK_DIR/burst" ]; do sleep 0.01; done
            fi
        done
        pass ;;
    interactive)
        printf 'your input: '
        read -r line
        echo "agent got: $line"
        pass ;;
    wide)
        i=0
        pad=$(printf '%07990d' 0)
        while [ "$i" -lt "${count:-200}" ]; do
            echo "wide $i $pad"
            i=$((i + 1))
            # Paced (under the ring's flood rate), so every reader is sent every line.
            [ $((i % 50)) -eq 0 ] && sleep 0.02
        done
        echo "waiting at the gate"
        while [ -f "$RALPH_TASK_DIR/gate" ]; do sleep 0.02; done
        pass ;;
    gate)
        echo "waiting at the gate"
        while [ -f "$RALPH_TASK_DIR/gate" ]; do sleep 0.02; done
        pass ;;
    careful)
        trap 'echo "saving my work"; sleep 1; exit 143' TERM
        i=0
        while :; do echo "working $i"; i=$((i + 1)); sleep 0.1; done ;;
    stubborn)
        trap '' TERM
        i=0
        while :; do echo "working $i"; i=$((i + 1)); sleep 0.1; done ;;
    fds)
        for fd in /proc/$$/fd/*; do echo "fd ${fd##*/} -> $(readlink "$fd")"; done
        pass ;;
    fifo) rm -f "$prd"; mkfifo "$prd"; echo "prd.json is a FIFO now" ;;
    claims)
        start=$(date +%s%N)
        seq "${count:-1000}" | sed 's|^|<promise>COMPLETE</promise> |'
        end=$(date +%s%N)
        echo $((end - start)) > "$RALPH_TASK_DIR/claims-ns" ;;
    fail) echo "something broke"; exit 1 ;;
esac
