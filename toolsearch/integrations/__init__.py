"""Plug-ins for agent frameworks: LangChain, Pydantic AI and the OpenAI Agents SDK (each an optional extra).

    from toolsearch.integrations.langchain import ToolSearchMiddleware      # pip install 'toolsearch[langchain]'
    from toolsearch.integrations.pydantic_ai import tool_search             # pip install 'toolsearch[pydantic-ai]'
    from toolsearch.integrations.openai_agents import AgentToolSearch       # pip install 'toolsearch[openai-agents]'

Nothing is imported here: each module imports its framework, so importing this package costs nothing.
"""
