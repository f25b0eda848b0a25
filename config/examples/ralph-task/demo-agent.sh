#!/bin/sh
# A scripted demo agent for ralph-server, so the example task runs without any
# AI tool: it reads its prompt, "works" for a while (a step every
# DEMO_AGENT_PAUSE seconds, default 5: about 20 s a story, a minute for the
# three, time to attach, inject and stop from a second terminal; printing as
# it goes, so `ralph-server attach` has something to show), marks its story
# passing in prd.json, and claims completion once no story is left failing.
# Run it on a copy of the example, since the loop edits prd.json and
# progress.txt (a fresh copy runs it again):
#   rm -rf /tmp/demo && cp -r config/examples/ralph-task /tmp/demo
#   ralph-server run /tmp/demo --agent-cmd "$PWD/config/examples/ralph-task/demo-agent.sh {PROMPT_FILE}"
# Stories are marked with sed, so each story stays on one line of prd.json.
set -u
prd="$RALPH_TASK_DIR/prd.json"
echo "demo agent: iteration $RALPH_ITERATION, working on $RALPH_STORY_ID"
echo "prompt: $(wc -l < "${1:-/dev/null}") lines"
for step in reading planning editing testing; do
    printf '\033[36m%s\033[0m %s...\n' "[$RALPH_STORY_ID]" "$step"
    sleep "${DEMO_AGENT_PAUSE:-5}"
done
sed -i.bak "/\"id\": *\"$RALPH_STORY_ID\"/ s/\"passes\": *false/\"passes\": true/" "$prd" && rm -f "$prd.bak"
printf '%s - %s: done by the demo agent\n' "$(date '+%H:%M:%S')" "$RALPH_STORY_ID" >> "$RALPH_TASK_DIR/progress.txt"
echo "$RALPH_STORY_ID passes"
if ! grep -q '"passes": *false' "$prd"; then
    echo "<promise>COMPLETE</promise>"
fi
