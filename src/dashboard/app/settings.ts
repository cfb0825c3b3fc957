import type { DashboardSettings } from '../shell.ts'

/** The deployment's settings, written into the page by the server (src/dashboard/shell.ts). */
export const settings: DashboardSettings = JSON.parse(document.getElementById('dashboard-settings')!.textContent!)
