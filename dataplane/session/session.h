// Public header of the session core: what engines, the spill store and tools may use.
#pragma once

#include "dataplane/session/builder.h"
#include "dataplane/session/config.h"
#include "dataplane/session/heart_beat.h"
#include "dataplane/session/owner_greeting.h"
#include "dataplane/session/parser.h"
#include "dataplane/session/placement_budget.h"
#include "dataplane/session/prelude.h"
#include "dataplane/session/queue_key.h"
#include "dataplane/session/spill_session.h"
#include "dataplane/session/stomp.h"
