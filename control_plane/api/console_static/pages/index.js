// Every page of the console: a URL pattern (#/...), its name in the navigation, and its render
// function (view element, URL parts, query) that may return a function called when leaving it.
// A new page is one module and one line here.
import { batchesPage, batchPage } from "./batches.js";
import { evalPage, evalsPage } from "./evals.js";
import { memoryPage } from "./memory.js";
import { sandboxPage } from "./sandbox.js";
import { schedulesPage } from "./schedules.js";
import { sessionPage } from "./session.js";
import { sessionsPage } from "./sessions.js";
import { settingsPage } from "./settings.js";
import { skillPage, skillsPage } from "./skills.js";
import { statusPage } from "./status.js";
import { terminalPage } from "./terminal.js";

export const PAGES = [sessionsPage, sessionPage, sandboxPage, terminalPage, skillsPage, skillPage, memoryPage, schedulesPage, evalsPage, evalPage, batchesPage, batchPage, statusPage, settingsPage];
